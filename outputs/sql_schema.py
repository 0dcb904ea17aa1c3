"""Replica tables in the target: created from the source's metadata, or an existing one checked
and refused with the fix when a replica cannot use it; columns the source added are added.

A replica table holds the source's columns (types: :mod:`dblog.outputs.sql_kinds`), the same
primary key, and the guard columns ``_dblog_major``, ``_dblog_minor`` (BIGINT NOT NULL) and
``_dblog_deleted`` (BOOLEAN NOT NULL, true for a tombstone). Non-key columns are nullable
(tombstones hold only their key). The view ``<table>_live`` (``view_name``) shows the rows
without tombstones and without the guard columns: readers use it.

DDL runs outside the data transactions: MySQL and MariaDB commit implicitly before DDL (and
after each ALTER TABLE, as SQLite does: pysqlite opens no transaction before DDL), so every step
here is idempotent and a crash or a failure between two steps is repaired by the next attempt:
columns already added are not added again, a view that does not list the table's columns is
rebuilt (at the next :func:`ensure`, or at the retry of a flush whose rebuild failed: the
replica's ``view_stale``), and a table another writer created after the look for it is used as
an existing one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dblog.core.model import TableId, TableInfo
from dblog.errors import FatalOutputError

from .sql_keys import (
    DROP,
    KeyText,
    created_key_texts,
    existing_key_texts,
    refuse_inexact_key,
)
from .sql_kinds import (
    DELETED,
    GUARD_COLUMNS,
    GUARD_MAJOR,
    GUARD_MINOR,
    ColumnKind,
    Kind,
    kinds_of,
    mysql_key_collation,
    sa_type,
)

_NAME_LIMIT = {"postgresql": 63, "mysql": 64, "mariadb": 64}


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
    view_stale: bool = False
    """Columns were added and the view not rebuilt since: :func:`refresh_view` before use."""


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


def data_columns(inspector: Any, schema: str | None, name: str) -> list[str]:
    """The columns of table or view ``name`` but the guard columns, in their order."""
    return [c["name"] for c in inspector.get_columns(name, schema=schema)
            if c["name"] not in GUARD_COLUMNS]


def create_view(engine: Engine, replica: ReplicaTable) -> None:
    """(Re)create the view without tombstones (after the table or its columns changed): every
    column of the table but the guard columns (those the source dropped too)."""
    quote = engine.dialect.identifier_preparer.quote
    table = replica.table
    view = _quoted(engine, table.schema, replica.view)
    columns = ", ".join(quote(c) for c in data_columns(sa.inspect(engine), table.schema,
                                                       table.name))
    body = (f"AS SELECT {columns} FROM {_quoted(engine, table.schema, table.name)} "
            f"WHERE NOT {quote(DELETED)}")
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            conn.execute(sa.text(f"DROP VIEW IF EXISTS {view}"))
            conn.execute(sa.text(f"CREATE VIEW {view} {body}"))
        else:
            conn.execute(sa.text(f"CREATE OR REPLACE VIEW {view} {body}"))


def _planned(engine: Engine, info: TableInfo, naming: Naming) -> ReplicaTable:
    """The replica table of ``info`` as this output writes it (``engine`` has connected: a
    MySQL/MariaDB key collation depends on the server's version)."""
    dialect = engine.dialect.name
    name, view = naming.names(info.table, dialect)
    kinds = kinds_of(info)
    collation = mysql_key_collation(bool(getattr(engine.dialect, "is_mariadb", False)),
                                    engine.dialect.server_version_info or ())
    table = build_table(info.table, name, naming.schema, kinds, info.key_columns, dialect,
                        collation)
    return ReplicaTable(info.table, table, view, info.key_columns, kinds,
                        key_collation=collation)


def _missing(name: str) -> FatalOutputError:
    return FatalOutputError(f"replica table {name} does not exist",
                            fix="create it, or set create_tables: true")


def ensure(engine: Engine, info: TableInfo, naming: Naming, create: bool) -> ReplicaTable:
    """The replica table of ``info``: created when missing (``create``), else checked, the
    source's columns it lacks added, and its view rebuilt when missing or when it does not
    list the table's columns (a failure after an ALTER TABLE, before the view's rebuild)."""
    inspector = sa.inspect(engine)  # connects: the dialect knows its server from here on
    replica = _planned(engine, info, naming)
    name, view = replica.table.name, replica.view
    if not inspector.has_table(name, schema=naming.schema):
        if not create:
            raise _missing(name)
        if _created(engine, replica):
            return replica
        inspector = sa.inspect(engine)  # another writer created it meanwhile
    existing = verified(engine, inspector, replica)
    added = {c: k for c, k in replica.kinds.items() if c not in existing}
    if added:
        add_columns(engine, replica, added)
    elif view not in inspector.get_view_names(schema=naming.schema) or data_columns(
            inspector, naming.schema, view) != [c for c in existing if c not in GUARD_COLUMNS]:
        create_view(engine, replica)
    return replica


def _created(engine: Engine, replica: ReplicaTable) -> bool:
    """Create ``replica``'s table and view; False when the CREATE TABLE failed because the
    table exists now (another pipeline, or a deposed leader, created it after the look for
    it: a fresh look tells), the error otherwise."""
    table = replica.table
    try:
        table.create(engine)
    except sa.exc.DBAPIError:
        if sa.inspect(engine).has_table(table.name, schema=table.schema):
            return False
        raise
    create_view(engine, replica)
    replica.key_texts = created_key_texts(replica, engine.dialect.name)
    return True


def verified(engine: Engine, inspector: Any, replica: ReplicaTable,
             unique: bool = True) -> dict[str, Any]:
    """The columns (by name) of ``replica``'s existing table, which is refused with the fix
    when a replica cannot use it (:func:`check_existing`; ``unique``: also unique constraints
    besides the primary key). A MySQL/MariaDB table's text key columns are set on
    ``replica``, or refused when their collation merges keys
    (:func:`~dblog.outputs.sql_keys.existing_key_texts`)."""
    table = replica.table
    existing = {c["name"]: c for c in inspector.get_columns(table.name, schema=table.schema)}
    check_existing(inspector, replica, existing, unique)
    if engine.dialect.name in ("mysql", "mariadb"):
        replica.key_texts = existing_key_texts(engine, replica)
    return existing


def refusal(engine: Engine, inspector: Any, info: TableInfo, naming: Naming,
            create: bool) -> FatalOutputError | None:
    """What :func:`ensure` would refuse of ``info``'s replica table, found without changing
    anything (for ``dblog check``; unique constraints aside: the check reports them for
    every replica table); None when the table can be used, or does not exist yet and
    ``create`` will create it."""
    try:
        replica = _planned(engine, info, naming)
        if not inspector.has_table(replica.table.name, schema=naming.schema):
            return None if create else _missing(replica.table.name)
        verified(engine, inspector, replica, unique=False)
    except FatalOutputError as exc:
        return exc
    return None


def add_columns(engine: Engine, replica: ReplicaTable, added: dict[str, ColumnKind]) -> None:
    """Add columns (nullable) to the table and to its view. Each ALTER TABLE may commit by
    itself (MySQL/MariaDB, SQLite): columns the table has already (an earlier attempt's) are
    not added again, and the view is rebuilt at the next attempt when this one fails first
    (``view_stale``)."""
    dialect = engine.dialect
    table = replica.table
    target = _quoted(engine, table.schema, table.name)
    replica.view_stale = True
    present = set(data_columns(sa.inspect(engine), table.schema, table.name))
    with engine.begin() as conn:
        for column, kind in added.items():
            if column in present:
                continue
            ddl = sa_type(kind, dialect.name, False).compile(dialect=dialect)
            conn.execute(sa.text(f"ALTER TABLE {target} ADD COLUMN "
                                 f"{dialect.identifier_preparer.quote(column)} {ddl}"))
    replica.kinds.update(added)
    replica.table = build_table(replica.source, table.name, table.schema, replica.kinds,
                                replica.key, dialect.name, replica.key_collation)
    refresh_view(engine, replica)


def refresh_view(engine: Engine, replica: ReplicaTable) -> None:
    """Rebuild the view, and mark it no longer stale once that succeeded."""
    create_view(engine, replica)
    replica.view_stale = False


def check_existing(inspector: Any, replica: ReplicaTable, existing: dict[str, Any],
                   unique: bool = True) -> None:
    """Refuse an existing table a replica cannot use, naming what to change (``unique``:
    also unique constraints besides the primary key)."""
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
            + DROP)
    for column, kind in replica.kinds.items():
        found = existing.get(column)
        if found is not None:
            _check_column(inspector, replica, column, kind, found)
    extra = extra_unique(inspector, name, schema, primary) if unique else []
    if extra:
        raise FatalOutputError(
            f"replica table {name} has unique constraints besides its primary key: "
            f"{extra}; an upsert relies on the primary key alone (in flight, and among "
            "tombstones, other unique values can repeat)",
            fix=f"drop {', '.join(extra)} on the replica (the source enforces them)")


def _check_column(inspector: Any, replica: ReplicaTable, column: str, kind: ColumnKind,
                  found: dict[str, Any]) -> None:
    name = replica.table.name
    if not compatible(kind, found["type"]):
        raise FatalOutputError(
            f"replica table {name}: column {column} is {found['type']}, which cannot "
            f"hold the source's {kind.kind.value} values",
            fix=f"change its type to {_expected(kind, inspector)}, " + DROP)
    if column not in replica.key and not found.get("nullable", True):
        raise FatalOutputError(
            f"replica table {name}: column {column} is NOT NULL, but tombstones (deleted "
            "rows kept with their guard) hold only the key",
            fix=f"make {column} nullable (ALTER TABLE ... DROP NOT NULL / MODIFY ... NULL)")
    refuse_inexact_key(inspector.bind, replica, column, kind, found["type"])


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
