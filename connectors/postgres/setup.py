"""Start-up checks and objects: wal_level, plugin, watermark table, replication slot.

Each problem is reported with the statement or setting that fixes it; ``dblog check`` prints the
same findings without changing anything.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from dblog.connectors.postgres.positions import Lsn
from dblog.core.model import TableId
from dblog.core.positions import Position
from dblog.errors import FatalSourceError
from dblog.spi import Finding

from .catalog import quote as sql_ident
from .catalog import regclass
from .errors import classify


def check_server(conn: psycopg.Connection, plugin: str) -> list[Finding]:
    findings: list[Finding] = []
    wal_level = conn.execute("SHOW wal_level").fetchone()
    if not wal_level or wal_level[0] != "logical":
        findings.append(Finding(
            "error", f"wal_level is {wal_level[0] if wal_level else '?'}, logical decoding needs "
            "'logical'", "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL"))
    allowed = conn.execute(
        "SELECT setting FROM pg_settings WHERE name = 'output_plugin_libraries'").fetchone()
    if allowed is not None and plugin not in [p.strip() for p in allowed[0].split(",")]:
        findings.append(Finding(
            "error", f"output_plugin_libraries ({allowed[0]!r}) does not list {plugin}; this "
            "PostgreSQL build only loads the output plugins listed there",
            f"ALTER SYSTEM SET output_plugin_libraries = '{allowed[0]},{plugin}'; restart"))
    rights = conn.execute(
        "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    if not rights or not rights[0]:
        findings.append(Finding("error", "the connecting role lacks the REPLICATION attribute",
                                "ALTER ROLE <user> WITH REPLICATION;"))
    return findings


def watermark_rights(conn: psycopg.Connection, table: TableId) -> list[Finding]:
    """Whether this role can use the watermark table, or create it: USAGE on its schema and
    SELECT, INSERT, UPDATE on it, or (when missing) CREATE on the database (which ``CREATE
    SCHEMA IF NOT EXISTS`` checks even for an existing schema)."""
    role, may_create = conn.execute(
        "SELECT current_user, has_database_privilege(current_database(), 'CREATE')").fetchone() \
        or ("?", False)
    create_fix = (f"as an owner run: CREATE SCHEMA IF NOT EXISTS {sql_ident(table.schema)}; "
                  f"CREATE TABLE {regclass(table)} (name text PRIMARY KEY, value text NOT NULL, "
                  "updated_at timestamptz NOT NULL DEFAULT now()); " + _grants(table, role))
    schema = conn.execute("SELECT has_schema_privilege(oid, 'USAGE') FROM pg_namespace "
                          "WHERE nspname = %s", (table.schema,)).fetchone()
    if schema is None or not schema[0]:
        if schema is not None:
            return [Finding("error", f"role {role} lacks USAGE on schema {table.schema} of the "
                            f"watermark table {table}", "as an owner run: " + _grants(table, role))]
        return [] if may_create else [Finding(
            "error", f"the watermark table {table} does not exist and role {role} may not "
                     "create it (no CREATE right on the database)", create_fix)]
    exists = conn.execute("SELECT to_regclass(%s)", (regclass(table),)).fetchone()
    if not exists or exists[0] is None:
        return [] if may_create else [Finding(
            "error", f"the watermark table {table} does not exist and role {role} may not "
                     "create it (no CREATE right on the database)", create_fix)]
    held = conn.execute("SELECT has_table_privilege(%s::regclass, 'SELECT'), "
                        "has_table_privilege(%s::regclass, 'INSERT'), "
                        "has_table_privilege(%s::regclass, 'UPDATE')",
                        (regclass(table),) * 3).fetchone() or (False, False, False)
    lacking = [p for p, ok in zip(("SELECT", "INSERT", "UPDATE"), held, strict=True) if not ok]
    if lacking:
        return [Finding("error", f"role {role} lacks {', '.join(lacking)} on the watermark "
                        f"table {table}", "as an owner run: " + _grants(table, role))]
    return []


def _grants(table: TableId, role: str) -> str:
    return (f"GRANT USAGE ON SCHEMA {sql_ident(table.schema)} TO {sql_ident(role)}; "
            f"GRANT SELECT, INSERT, UPDATE ON {regclass(table)} TO {sql_ident(role)};")


def ensure_watermark_table(conn: psycopg.Connection, table: TableId, instance: str) -> None:
    """Create the table unless it exists (a DBA may have created it for a role without CREATE
    rights), then this instance's row."""
    ident = sql.Identifier(table.schema, table.name)
    exists = conn.execute("SELECT to_regclass(%s)", (regclass(table),)).fetchone()
    statements = [] if exists and exists[0] else [
        sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(table.schema)),
        sql.SQL("CREATE TABLE IF NOT EXISTS {} (name text PRIMARY KEY, value text NOT NULL, "
                "updated_at timestamptz NOT NULL DEFAULT now())").format(ident),
    ]
    try:
        for statement in statements:
            conn.execute(statement)
        conn.execute(sql.SQL("INSERT INTO {} (name, value) VALUES (%s, 'init') "
                             "ON CONFLICT (name) DO NOTHING").format(ident), (instance,))
    except psycopg.errors.InsufficientPrivilege as exc:
        raise FatalSourceError(
            f"cannot create the watermark table {table}: {exc}",
            fix=f"as an owner run: CREATE SCHEMA {table.schema}; CREATE TABLE {table} (name text "
                "PRIMARY KEY, value text NOT NULL, updated_at timestamptz NOT NULL DEFAULT now()); "
                f"GRANT USAGE ON SCHEMA {table.schema} TO <dblog user>; "
                f"GRANT SELECT, INSERT, UPDATE ON {table} TO <dblog user>",
        ) from exc


def ensure_slot(conn: psycopg.Connection, slot: str, plugin: str) -> bool:
    """Create the logical slot if missing; return True when it was created now."""
    row = conn.execute("SELECT plugin, database, current_database() FROM pg_replication_slots "
                       "WHERE slot_name = %s", (slot,)).fetchone()
    if row is not None:
        if row[1] != row[2]:
            raise FatalSourceError(
                f"replication slot {slot} belongs to database {row[1]!r}, not {row[2]!r} "
                "(slot names are shared by the whole server)",
                fix="choose another source.slot for this database")
        if row[0] != plugin:
            raise FatalSourceError(
                f"replication slot {slot} uses the output plugin {row[0]!r}, not {plugin!r}",
                fix=f"choose another source.slot, or drop it: "
                    f"SELECT pg_drop_replication_slot('{slot}')")
        return False
    try:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, %s)", (slot, plugin))
    except psycopg.Error as exc:
        raise classify(exc, f"creating replication slot {slot}") from exc
    return True


def verify_resume(conn: psycopg.Connection, slot: str, position: Position | None) -> None:
    """Refuse to resume when the slot is gone or already past the committed position: the
    changes in between would be lost silently."""
    row = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                       "WHERE slot_name = %s", (slot,)).fetchone()
    if row is None:
        raise FatalSourceError(
            f"replication slot {slot} does not exist", fix="restart to create it, then re-dump")
    if position is None or row[0] is None:
        return
    confirmed = Lsn.parse(row[0])
    if isinstance(position, Lsn) and confirmed > position:
        raise FatalSourceError(
            f"slot {slot} is at {confirmed}, past the committed position {position}: another "
            "consumer advanced it or it was recreated, so changes in between are gone",
            fix="remove the state to start over and request a full dump (a jsonl output that "
                "holds events then needs reset: true for that start), or use the slot only for "
                "this pipeline")
