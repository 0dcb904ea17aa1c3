"""``dblog retire`` for PostgreSQL: drop the pipeline's logical slot (refused while a consumer
holds it), delete its watermark row, and drop the watermark table once no row is left."""

from __future__ import annotations

import psycopg
from psycopg import sql

from dblog.core.model import TableId
from dblog.errors import FatalSourceError

from .errors import classify


def what_goes(conn: psycopg.Connection, slot: str, table: TableId, instance: str) -> list[str]:
    found = []
    row = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s",
                       (slot,)).fetchone()
    if row is not None:
        found.append(f"replication slot {slot}" + (" (in use now)" if row[0] else ""))
    if conn.execute("SELECT to_regclass(%s)", (str(table),)).fetchone() not in (None, (None,)):
        found.append(f"row {instance!r} of {table}")
        others = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE name <> %s").format(
            sql.Identifier(table.schema, table.name)), (instance,)).fetchone()
        if others is not None and others[0] == 0:
            found.append(f"table {table} (no other pipeline uses it)")
    return found


def retire(conn: psycopg.Connection, slot: str, table: TableId, instance: str) -> list[str]:
    gone = what_goes(conn, slot, table, instance)
    if any("(in use now)" in g for g in gone):
        raise FatalSourceError(f"replication slot {slot} is in use: dblog (or another "
                               "consumer) still runs", fix="stop the pipeline, then retire it")
    try:
        if any(g.startswith("replication slot") for g in gone):
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        target = sql.Identifier(table.schema, table.name)
        if any(g.startswith("row ") for g in gone):
            conn.execute(sql.SQL("DELETE FROM {} WHERE name = %s").format(target), (instance,))
        if any(g.startswith("table ") for g in gone):
            conn.execute(sql.SQL("DROP TABLE {}").format(target))
    except psycopg.Error as exc:
        raise classify(exc, "retiring the pipeline's objects") from exc
    return gone
