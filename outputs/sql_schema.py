"""Replica tables in the target: created from the source's metadata, or an existing one checked
and refused with the fix when a replica cannot use it; columns the source added are added.

A replica table holds the source's columns (types: :mod:`dblog.outputs.sql_kinds`), the same
primary key, and the guard columns ``_dblog_major``, ``_dblog_minor`` (BIGINT NOT NULL) and
``_dblog_deleted`` (BOOLEAN NOT NULL, true for a tombstone). Non-key columns are nullable
(tombstones hold only their key). The view ``<table>_live`` (``view_name``) shows the rows
without tombstones and without the guard columns: readers use it.

DDL runs outside the data transactions: MySQL and MariaDB commit implicitly before DDL, and
every statement here is idempotent (a crash after it only leaves the table ready).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dblog.core.model import Key, TableId, TableInfo
from dblog.core.requestcheck import shown
from dblog.errors import FatalOutputError

from .sql_kinds import (
    DELETED,
    GUARD_COLUMNS,
    GUARD_MAJOR,
    GUARD_MINOR,
    MYSQL_KEY_MAX,
    NOPAD_BINARY,
    ColumnKind,
    Kind,
    exact_key,
    kinds_of,
    mysql_key_collation,
    mysql_key_length,
    sa_type,
    stored_as_text,
)

_NAME_LIMIT = {"postgresql": 63, "mysql": 64, "mariadb": 64}
_DROP = "or drop the table (and its view) so that dblog creates it, then dump the source again"


@dataclass(frozen=True)
class KeyText:
    """A text key column of a MySQL/MariaDB replica table and what it holds: at most
    ``length`` characters (a VARCHAR; longer keys would be cut, or refused by a strict
    server with no word of the fix) and, when ``padded`` (a PAD SPACE collation, only on
    MySQL before 8.0.17), no key ending in a space (it would meet the key without it)."""

    column: str
    at: int
    """Its index in the key."""
    length: int
    collation: str
    padded: bool = False


@dataclass
class ReplicaTable:
    """One replica table as the output writes it."""

    source: TableId
    table: sa.Table
    view: str
    key: tuple[str, ...]
    kinds: dict[str, ColumnKind] = field(default_factory=dict)
    """Every data column the output writes, in table order, with its kind."""
    key_texts: tuple[KeyText, ...] = ()
    """MySQL/MariaDB: the text key columns, whose keys are checked before a write."""
    key_collation: str = "utf8mb4_nopad_bin"
    """MySQL/MariaDB: the collation of text key columns this output creates."""


@dataclass(frozen=True)
class Naming:
    """Where replica tables go: ``schema`` (None: the connection's default) and name templates
    with ``{schema}`` and ``{table}`` (the source's)."""

    schema: str | None
    table: str
    view: str

    def names(self, source: TableId, dialect: str) -> tuple[str, str]:
        names = (self.table.format(schema=source.schema, table=source.name),
                 self.view.format(schema=source.schema, table=source.name))
        limit = _NAME_LIMIT.get(dialect)
        for name in names:
            if limit is not None and len(name) > limit:
                raise FatalOutputError(
                    f"replica name {name!r} is longer than {dialect}'s {limit} characters",
                    fix="set the sql output's table_name/view_name templates to shorter names")
        return names

    def refuse_shared(self, source: TableId, others: Iterable[TableId], dialect: str) -> None:
        """Refuse ``source`` when its table or view name is one of ``others``' (the source
        tables this output already writes). Two source tables in one replica table would
        overwrite each other's rows where their keys meet, silently: the default
        ``table_name`` ``{table}`` does so for tables of the same name in two schemas."""
        mine = set(self.names(source, dialect))
        for other in others:
            shared = mine & set(self.names(other, dialect))
            if other != source and shared:
                raise FatalOutputError(
                    f"source tables {other} and {source} would share the replica "
                    f"{'/'.join(sorted(shared))}",
                    fix="set the sql output's table_name and view_name to templates that tell "
                        "them apart, e.g. table_name: \"{schema}_{table}\", view_name: "
                        "\"{schema}_{table}_live\" (then dump the tables again)")


def build_table(source: TableId, name: str, schema: str | None, kinds: dict[str, ColumnKind],
                key: tuple[str, ...], dialect: str,
                key_collation: str = "utf8mb4_nopad_bin") -> sa.Table:
    """The SQLAlchemy table of a replica (nothing is created here)."""
    missing = [k for k in key if k not in kinds]
    if not key or missing:
        raise FatalOutputError(f"{source}: no usable primary key for a replica (key columns "
                               f"{list(key)}, missing {missing})",
                               fix="give the source table a primary key or set key columns")
    columns = [sa.Column(c, sa_type(kind, dialect, c in key, key_collation),
                         primary_key=c in key,
                         nullable=c not in key, autoincrement=False)
               for c, kind in kinds.items()]
    columns += [sa.Column(GUARD_MAJOR, sa.BigInteger(), nullable=False),
                sa.Column(GUARD_MINOR, sa.BigInteger(), nullable=False),
                sa.Column(DELETED, sa.Boolean(create_constraint=False), nullable=False)]
    return sa.Table(name, sa.MetaData(), *columns, schema=schema)


def _quoted(engine: Engine, schema: str | None, name: str) -> str:
    quote = engine.dialect.identifier_preparer.quote
    return f"{quote(schema)}.{quote(name)}" if schema else quote(name)


def create_view(engine: Engine, replica: ReplicaTable) -> None:
    """(Re)create the view without tombstones (after the table or its columns changed)."""
    quote = engine.dialect.identifier_preparer.quote
    table = replica.table
    view = _quoted(engine, table.schema, replica.view)
    columns = ", ".join(quote(c) for c in replica.kinds)
    body = (f"AS SELECT {columns} FROM {_quoted(engine, table.schema, table.name)} "
            f"WHERE NOT {quote(DELETED)}")
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            conn.execute(sa.text(f"DROP VIEW IF EXISTS {view}"))
            conn.execute(sa.text(f"CREATE VIEW {view} {body}"))
        else:
            conn.execute(sa.text(f"CREATE OR REPLACE VIEW {view} {body}"))


def ensure(engine: Engine, info: TableInfo, naming: Naming, create: bool) -> ReplicaTable:
    """The replica table of ``info``: created when missing (``create``), else checked, and
    the source's columns it lacks added."""
    dialect = engine.dialect.name
    name, view = naming.names(info.table, dialect)
    kinds = kinds_of(info)
    inspector = sa.inspect(engine)  # connects: the dialect knows its server from here on
    collation = mysql_key_collation(bool(getattr(engine.dialect, "is_mariadb", False)),
                                    engine.dialect.server_version_info or ())
    table = build_table(info.table, name, naming.schema, kinds, info.key_columns, dialect,
                        collation)
    replica = ReplicaTable(info.table, table, view, info.key_columns, kinds,
                           key_collation=collation)
    if not inspector.has_table(name, schema=naming.schema):
        if not create:
            raise FatalOutputError(f"replica table {name} does not exist",
                                   fix="create it, or set create_tables: true")
        table.create(engine)
        create_view(engine, replica)
        replica.key_texts = created_key_texts(replica, dialect)
        return replica
    existing = {c["name"]: c for c in inspector.get_columns(name, schema=naming.schema)}
    check_existing(inspector, replica, existing)
    if dialect in ("mysql", "mariadb"):
        replica.key_texts = existing_key_texts(engine, replica)
    added = {c: k for c, k in kinds.items() if c not in existing}
    if added:
        add_columns(engine, replica, added)
    elif view not in inspector.get_view_names(schema=naming.schema):
        create_view(engine, replica)
    return replica


def add_columns(engine: Engine, replica: ReplicaTable, added: dict[str, ColumnKind]) -> None:
    """Add columns (nullable) to the table and to its view."""
    dialect = engine.dialect
    table = replica.table
    target = _quoted(engine, table.schema, table.name)
    with engine.begin() as conn:
        for column, kind in added.items():
            ddl = sa_type(kind, dialect.name, False).compile(dialect=dialect)
            conn.execute(sa.text(f"ALTER TABLE {target} ADD COLUMN "
                                 f"{dialect.identifier_preparer.quote(column)} {ddl}"))
    replica.kinds.update(added)
    replica.table = build_table(replica.source, table.name, table.schema, replica.kinds,
                                replica.key, dialect.name, replica.key_collation)
    create_view(engine, replica)


def created_key_texts(replica: ReplicaTable, dialect: str) -> tuple[KeyText, ...]:
    """The text key columns of a MySQL/MariaDB replica table this output created."""
    if dialect not in ("mysql", "mariadb"):
        return ()
    return tuple(KeyText(c, at, mysql_key_length(replica.kinds[c]), replica.key_collation,
                         replica.key_collation not in NOPAD_BINARY)
                 for at, c in enumerate(replica.key) if stored_as_text(replica.kinds[c], dialect))


_KEY_COLUMNS = sa.text(
    "SELECT COLUMN_NAME, DATA_TYPE, CHARACTER_MAXIMUM_LENGTH, COLLATION_NAME FROM "
    "information_schema.COLUMNS WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND "
    "TABLE_NAME = :name")


def existing_key_texts(engine: Engine, replica: ReplicaTable) -> tuple[KeyText, ...]:
    """The text key columns of an existing MySQL/MariaDB replica table, from the catalog.
    Refused with the fix when the collation merges keys the source keeps apart (a ``_ci`` or
    PAD SPACE one: dblog created ``utf8mb4_bin`` keys before) or the type is CHAR (it drops
    trailing spaces)."""
    table = replica.table
    with engine.connect() as conn:
        found = {str(r[0]): r[1:] for r in conn.execute(
            _KEY_COLUMNS, {"schema": table.schema, "name": table.name})}
    out = []
    for at, column in enumerate(replica.key):
        data_type, length, collation = found.get(column, (None, None, None))
        if collation is None:
            continue  # not a text column: numbers and temporal values compare exactly
        padded = collation == replica.key_collation == "utf8mb4_bin"  # MySQL < 8.0.17
        if str(data_type).lower() != "varchar" or (collation not in NOPAD_BINARY
                                                   and not padded):
            raise FatalOutputError(
                f"replica table {table.name}: key column {column} is "
                f"{str(data_type).upper()}({length}) COLLATE {collation}, under which keys the "
                "source keeps apart are one key (a PAD SPACE collation or CHAR: 'a' and 'a '; "
                "a _ci one: 'a' and 'A'), so their rows would overwrite each other",
                fix=f"{_widen(engine, replica, column, int(length or 0))}, then dump the table "
                    "again (rows the old collation merged are missing); " + _DROP)
        out.append(KeyText(column, at, int(length), collation, padded))
    return tuple(out)


def _widen(engine: Engine, replica: ReplicaTable, column: str, length: int) -> str:
    quote = engine.dialect.identifier_preparer.quote
    table = _quoted(engine, replica.table.schema, replica.table.name)
    return (f"ALTER TABLE {table} MODIFY {quote(column)} VARCHAR({length}) CHARACTER SET "
            f"utf8mb4 COLLATE {replica.key_collation} NOT NULL")


def check_keys(engine: Engine, replica: ReplicaTable, keys: Iterable[Key]) -> None:
    """Refuse, naming the table, the column and the fix, a key a MySQL/MariaDB text key
    column cannot hold as the source's own: longer than the column (a lenient server would
    cut it, and two keys could meet), or ending in a space under a PAD SPACE collation."""
    texts = replica.key_texts
    for key in keys:
        for text in texts:
            value = key[text.at]
            if not isinstance(value, str):
                continue
            if len(value) > text.length:
                raise FatalOutputError(
                    f"replica table {replica.table.name}: key column {text.column} holds at "
                    f"most {text.length} characters (VARCHAR({text.length})), but a key of "
                    f"source table {replica.source} has {len(value)}: {shown(value)}",
                    fix=_longer(engine, replica, text, len(value)))
            if text.padded and value.endswith(" "):
                raise FatalOutputError(
                    f"replica table {replica.table.name}: key column {text.column} has the "
                    f"PAD SPACE collation {text.collation}, under which the key {shown(value)} "
                    "of the source is the same key as without its trailing spaces",
                    fix="use a target with a NO PAD binary collation (MariaDB, MySQL 8.0.17+), "
                        "PostgreSQL or SQLite")


def _longer(engine: Engine, replica: ReplicaTable, text: KeyText, needed: int) -> str:
    if needed > MYSQL_KEY_MAX:
        return (f"a MySQL/MariaDB key holds at most {MYSQL_KEY_MAX} utf8mb4 characters "
                "(InnoDB's 3,072 bytes): replicate this table to a PostgreSQL or SQLite target")
    return (f"{_widen(engine, replica, text.column, MYSQL_KEY_MAX)} (at most {MYSQL_KEY_MAX}: "
            "InnoDB keys hold 3,072 bytes), then restart the pipeline; replica tables dblog "
            "creates take the length from the source column's type (varchar(n)), else 255")


def check_existing(inspector: Any, replica: ReplicaTable, existing: dict[str, Any]) -> None:
    """Refuse an existing table a replica cannot use, naming what to change."""
    name, schema = replica.table.name, replica.table.schema
    guards = [c for c in GUARD_COLUMNS if c not in existing]
    if guards:
        raise FatalOutputError(
            f"table {name} exists but is not a dblog replica (it has no {', '.join(guards)})",
            fix="drop it, or set the sql output's table_name template to another name")
    primary = inspector.get_pk_constraint(name, schema=schema)["constrained_columns"]
    if set(primary) != set(replica.key):
        raise FatalOutputError(
            f"replica table {name} has primary key {primary}, the source {replica.source} "
            f"has {list(replica.key)}", fix=f"make ({', '.join(replica.key)}) its primary key, "
            + _DROP)
    for column, kind in replica.kinds.items():
        found = existing.get(column)
        if found is not None:
            _check_column(inspector, replica, column, kind, found)
    unique = extra_unique(inspector, name, schema, primary)
    if unique:
        raise FatalOutputError(
            f"replica table {name} has unique constraints besides its primary key: "
            f"{unique}; an upsert relies on the primary key alone (in flight, and among "
            "tombstones, other unique values can repeat)",
            fix=f"drop {', '.join(unique)} on the replica (the source enforces them)")


def _check_column(inspector: Any, replica: ReplicaTable, column: str, kind: ColumnKind,
                  found: dict[str, Any]) -> None:
    name = replica.table.name
    if not compatible(kind, found["type"]):
        raise FatalOutputError(
            f"replica table {name}: column {column} is {found['type']}, which cannot "
            f"hold the source's {kind.kind.value} values",
            fix=f"change its type to {_expected(kind, inspector)}, " + _DROP)
    if column not in replica.key and not found.get("nullable", True):
        raise FatalOutputError(
            f"replica table {name}: column {column} is NOT NULL, but tombstones (deleted "
            "rows kept with their guard) hold only the key",
            fix=f"make {column} nullable (ALTER TABLE ... DROP NOT NULL / MODIFY ... NULL)")
    if column in replica.key and exact_key(kind) and not isinstance(found["type"], sa.String):
        raise FatalOutputError(
            f"replica table {name}: key column {column} is {found['type']}, which makes one "
            "key of values the source's events keep apart (1.5 and 1.50 of an unconstrained "
            "numeric: PostgreSQL logs a change from one to the other as a key change), so "
            "such a change would lose the row", fix=_as_text(inspector.bind, replica, column))


def _as_text(engine: Engine, replica: ReplicaTable, column: str) -> str:
    """The fix for a key column that must hold the exact text of its values."""
    dialect, quote = engine.dialect.name, engine.dialect.identifier_preparer.quote
    table = _quoted(engine, replica.table.schema, replica.table.name)
    if dialect == "postgresql":
        alter = (f"DROP VIEW {_quoted(engine, replica.table.schema, replica.view)}; ALTER "
                 f"TABLE {table} ALTER COLUMN {quote(column)} TYPE text (dblog creates the "
                 "view again)")
    elif dialect in ("mysql", "mariadb"):
        alter = _widen(engine, replica, column, mysql_key_length(replica.kinds[column]))
    else:
        return "drop the table (and its view) so that dblog creates it, then dump the source again"
    return f"{alter}, then dump the table again (rows merged so far are missing); " + _DROP


def _expected(kind: ColumnKind, inspector: Any) -> str:
    dialect = inspector.bind.dialect
    return str(sa_type(kind, dialect.name, False).compile(dialect=dialect))


def compatible(kind: ColumnKind, found: sa.types.TypeEngine[Any]) -> bool:
    """Whether an existing column type holds ``kind``'s values without loss."""
    if isinstance(found, sa.String):
        return kind.kind in (Kind.TEXT, Kind.JSON, Kind.DECIMAL, Kind.BIGUINT)
    if kind.kind is Kind.BOOL:
        return isinstance(found, (sa.Boolean, sa.Integer))
    if kind.kind is Kind.INT:
        return isinstance(found, sa.Integer) or (
            isinstance(found, sa.Numeric) and not isinstance(found, sa.Float)
            and found.scale == 0)
    if kind.kind is Kind.FLOAT:
        return isinstance(found, sa.Float)
    if kind.kind in (Kind.DECIMAL, Kind.BIGUINT):
        if isinstance(found, sa.Float) or not isinstance(found, sa.Numeric):
            return False
        if kind.kind is Kind.BIGUINT:
            return found.scale in (0, None) and (found.precision or 1000) >= 20
        return kind.scale is None or found.scale == kind.scale
    return False


def extra_unique(inspector: Any, name: str, schema: str | None,
                 primary: list[str]) -> list[str]:
    """Unique constraints and unique indexes other than the primary key's columns."""
    found: list[str] = []
    for constraint in inspector.get_unique_constraints(name, schema=schema):
        if set(constraint["column_names"]) != set(primary):
            found.append(str(constraint["name"]))
    for index in inspector.get_indexes(name, schema=schema):
        if index.get("unique") and set(index["column_names"]) != set(primary) \
                and str(index["name"]) not in found:
            found.append(str(index["name"]))
    return found
