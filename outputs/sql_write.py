"""One table plan (:class:`dblog.replica.TablePlan`) as SQL statements, per dialect; what
:class:`dblog.replica.MemoryReplica` does on dicts, inside the flush's transaction.

The upsert of every change of a table plan is one batched statement (``executemany``) whose
rows are written only where no row exists or the stored guard is smaller:

* PostgreSQL and SQLite: ``INSERT ... ON CONFLICT (key) DO UPDATE SET ... WHERE
  (t._dblog_major, t._dblog_minor) < (excluded._dblog_major, excluded._dblog_minor)``;
* MySQL and MariaDB have no ``WHERE`` there: ``ON DUPLICATE KEY UPDATE c = CASE WHEN <newer>
  THEN VALUES(c) ELSE c END`` for every column, the guard columns last and the minor before
  the major, because MySQL evaluates assignments left to right and ``<newer>`` reads the
  guard columns (after the minor changed, ``(major, new minor) < (new major, new minor)`` is
  still true exactly when the major must change).

A tombstone is the same upsert with the key, NULL values and ``_dblog_deleted`` true.
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Iterable
from functools import partial
from itertools import chain
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Connection

from dblog.core.model import Key, Row
from dblog.replica import Guard, RowChange, TablePlan, kept

from .sql_keys import check_keys
from .sql_kinds import (
    DELETED,
    GUARD_MAJOR,
    GUARD_MINOR,
    from_db,
    needs_conversion,
    to_db,
)
from .sql_schema import ReplicaTable

_DIALECTS: dict[str, sa.Dialect] = {
    "postgresql": postgresql.psycopg.dialect(),  # type: ignore[no-untyped-call]
    "sqlite": sqlite.pysqlite.dialect(),
    "mysql": mysql.mysqldb.dialect(), "mariadb": mysql.mysqldb.dialect()}
"""Compile-time dialects: identifier quoting and type DDL without a connection."""
_SQLITE_VARIABLES = 32_766 if sqlite3.sqlite_version_info >= (3, 32) else 999
"""SQLite's default limit of parameters per statement."""


def guard_condition(replica: ReplicaTable, dialect: str, new: str) -> str:
    """``<newer>``: the stored guard is below the incoming one (``new``: how the statement
    names the incoming row's columns, e.g. ``excluded.{}`` or ``VALUES({})``)."""
    quote = _quote(dialect)
    table = _qualified(replica, dialect)
    return (f"({table}.{quote(GUARD_MAJOR)}, {table}.{quote(GUARD_MINOR)}) < "
            f"({new.format(quote(GUARD_MAJOR))}, {new.format(quote(GUARD_MINOR))})")


def upsert_sql(replica: ReplicaTable, dialect: str, source: str | None = None,
               rows: int = 1) -> str:
    """The guarded upsert. PostgreSQL: ``INSERT ... SELECT`` from the ``source`` table (the
    rows staged there by COPY); SQLite: ``rows`` rows per statement; MySQL: one row, for
    ``executemany`` (which mysqlclient sends as multi-row statements)."""
    quote = _quote(dialect)
    columns = statement_columns(replica)
    updated = [c for c in columns if c not in replica.key]  # guard columns last, minor first
    listed = ", ".join(map(quote, columns))
    head = f"INSERT INTO {_qualified(replica, dialect)} ({listed}) "
    if source is not None:
        head += f"SELECT {listed} FROM {source} "
    else:
        mark = "?" if dialect == "sqlite" else "%s"
        group = "(" + ", ".join([mark] * len(columns)) + ")"
        head += "VALUES " + ", ".join([group] * rows) + " "
    if dialect in ("postgresql", "sqlite"):
        sets = ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in updated)
        return (head + f"ON CONFLICT ({', '.join(map(quote, replica.key))}) DO UPDATE SET "
                f"{sets} WHERE {guard_condition(replica, dialect, 'excluded.{}')}")
    newer = guard_condition(replica, dialect, "VALUES({})")
    table = _qualified(replica, dialect)
    sets = ", ".join(f"{quote(c)} = CASE WHEN {newer} THEN VALUES({quote(c)}) "
                     f"ELSE {table}.{quote(c)} END" for c in updated)
    return head + f"ON DUPLICATE KEY UPDATE {sets}"


def _stage(replica: ReplicaTable) -> tuple[str, str]:
    """A temporary table holding a plan's rows before the upsert (PostgreSQL), named after
    the column list, so an added column gets a new one."""
    quote = _quote("postgresql")
    columns = statement_columns(replica)
    name = quote(f"_dblog_stage_{zlib.crc32(repr((replica.table.name, columns)).encode()):x}")
    return name, (f"CREATE TEMP TABLE IF NOT EXISTS {name} AS SELECT "
                  f"{', '.join(map(quote, columns))} FROM {_qualified(replica, 'postgresql')} "
                  "WITH NO DATA")


def statement_columns(replica: ReplicaTable) -> list[str]:
    """The columns of the upsert's rows: the source's, then the deleted flag and the guard
    (minor before major: on MySQL the major must be assigned last, see the docstring)."""
    return [*replica.kinds, DELETED, GUARD_MINOR, GUARD_MAJOR]


def _quote(dialect: str) -> Any:
    return _DIALECTS[dialect].identifier_preparer.quote


def _qualified(replica: ReplicaTable, dialect: str) -> str:
    quote = _quote(dialect)
    table = replica.table
    return f"{quote(table.schema)}.{quote(table.name)}" if table.schema else quote(table.name)


def row_tuples(replica: ReplicaTable, changes: Iterable[tuple[RowChange, Row | None]],
               dialect: str) -> list[tuple[Any, ...]]:
    """The upsert parameters of each change, in :func:`statement_columns` order. The key
    columns hold the event's key: a MySQL key under a case-insensitive collation is normalised
    there (docs/sources/mysql.md), and rows must meet on it."""
    kinds = replica.kinds
    names = list(kinds)
    key_at = [names.index(k) for k in replica.key]
    convert = [(i, kind) for i, kind in enumerate(kinds.values())
               if needs_conversion(kind, dialect)]
    out: list[tuple[Any, ...]] = []
    append = out.append
    for change, row in changes:
        values: list[Any] = [None] * len(names) if row is None else list(map(row.get, names))
        for i, value in zip(key_at, change.key, strict=True):
            values[i] = value
        for i, kind in convert:
            values[i] = to_db(kind, dialect, values[i])
        guard = change.guard
        values += (row is None, guard.minor, guard.major)
        append(tuple(values))
    return out


def execute_upserts(conn: Connection, replica: ReplicaTable, rows: list[tuple[Any, ...]],
                    dialect: str) -> None:
    """PostgreSQL: COPY into a temporary table, then one ``INSERT ... SELECT``; SQLite:
    multi-row statements; MySQL: ``executemany``. Few driver calls per plan: each one lets
    the engine's threads take the interpreter lock, and with the engine's short switch
    interval a call per row (SQLite's executemany) waited for it on every row."""
    if dialect == "sqlite":
        _sqlite_upserts(conn, replica, rows)
        return
    if dialect != "postgresql":
        conn.exec_driver_sql(upsert_sql(replica, dialect), rows)
        return
    stage, create = _stage(replica)
    columns = ", ".join(map(_quote(dialect), statement_columns(replica)))
    driver = conn.connection.driver_connection  # psycopg's: its COPY formats rows in C
    assert driver is not None
    with driver.cursor() as cursor:
        cursor.execute(create)
        cursor.execute(f"TRUNCATE {stage}")
        with cursor.copy(f"COPY {stage} ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        cursor.execute(upsert_sql(replica, dialect, stage))


def _sqlite_upserts(conn: Connection, replica: ReplicaTable,
                    rows: list[tuple[Any, ...]]) -> None:
    """Statements of as many rows as SQLite's variable limit allows, the rest in statements
    of powers of two: the driver caches each distinct statement (128 per connection, a
    megabyte or two each at this size), so one per leftover count would grow the memory
    with every new flush size; these are at most ``log2(step) + 1`` distinct texts."""
    step = max(1, _SQLITE_VARIABLES // len(statement_columns(replica)))
    texts: dict[int, str] = {}
    i = 0
    while i < len(rows):
        left = len(rows) - i
        size = step if left >= step else 1 << (left.bit_length() - 1)
        sql = texts.get(size)
        if sql is None:
            sql = texts[size] = upsert_sql(replica, "sqlite", rows=size)
        conn.exec_driver_sql(sql, tuple(chain.from_iterable(rows[i:i + size])))
        i += size


def unknown_columns(replica: ReplicaTable, rows: Iterable[Row | None]) -> dict[str, Any]:
    """Columns the replica table lacks that some row has a value in (not None), each with
    its first such value. A column whose values are all None is left out: None says nothing
    of its type (taking it as JSON would quote the later values and refuse the source's
    type after a restart), and a None needs no column yet: the column, added once a value
    or the source's metadata names its type, reads NULL in the rows written before."""
    kinds = replica.kinds.keys()
    found: dict[str, Any] = {}
    for row in rows:
        if row is not None and not kinds >= row.keys():
            for column, value in row.items():
                if value is not None and column not in kinds and column not in found:
                    found[column] = value
    return found


def truncate(conn: Connection, replica: ReplicaTable, barrier: Guard) -> None:
    """Delete every row (tombstones too) older than the truncate."""
    table = replica.table
    conn.execute(table.delete().where(
        sa.tuple_(table.c[GUARD_MAJOR], table.c[GUARD_MINOR]) < tuple(barrier)))


def purge(conn: Connection, replica: ReplicaTable, bound: Guard) -> int:
    """Delete the tombstones below ``bound``; how many went."""
    table = replica.table
    result = conn.execute(table.delete().where(
        table.c[DELETED], sa.tuple_(table.c[GUARD_MAJOR], table.c[GUARD_MINOR]) < tuple(bound)))
    return int(result.rowcount)


def apply_table(conn: Connection, replica: ReplicaTable, plan: TablePlan,
                rows: list[Row | None], dialect: str) -> None:
    """Execute one table plan; ``rows`` are its changes' decoded after-images, in order."""
    if replica.key_texts:
        check_keys(conn.engine, replica, (c.key for c in plan.changes))
    if plan.truncate is not None:
        truncate(conn, replica, plan.truncate)
    changes = kept.with_kept(list(zip(plan.changes, rows, strict=True)),
                             partial(_stored, conn, replica),
                             kept.LeftOut(str(replica.source)))
    batch = row_tuples(replica, changes, dialect)
    if batch:
        execute_upserts(conn, replica, batch, dialect)


def _stored(conn: Connection, replica: ReplicaTable, keys: set[Key]
            ) -> dict[Key, tuple[Guard, Row | None]]:
    """The stored rows of ``keys`` (guard, canonical row or None for a tombstone)."""
    table, kinds = replica.table, replica.kinds
    key_cols = [table.c[k] for k in replica.key]
    match = key_cols[0].in_([k[0] for k in keys]) if len(key_cols) == 1 else \
        sa.tuple_(*key_cols).in_(list(keys))
    out: dict[Key, tuple[Guard, Row | None]] = {}
    for record in conn.execute(sa.select(table).where(match)).mappings():
        key = tuple(from_db(kinds[k], record[k]) for k in replica.key)
        row = None if record[DELETED] else {c: from_db(kinds[c], record[c]) for c in kinds}
        out[key] = (Guard(record[GUARD_MAJOR], record[GUARD_MINOR]), row)
    return out
