"""Catalog queries: columns, primary keys, tables, estimates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

from dblog.core.model import ColumnInfo, TableId, TableInfo
from dblog.errors import DumpRequestError

from .errors import classify

COLUMNS_SQL = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod)
FROM pg_attribute a
WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

PK_SQL = """
SELECT a.attname
FROM pg_index i
JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) ON true
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = %s::regclass AND i.indisprimary
ORDER BY k.ord
"""

_UNIQUE_INDEX_SQL = """
SELECT array_agg(a.attname ORDER BY k.ord) FROM pg_index i
JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) ON true
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = %s::regclass AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL
GROUP BY i.indexrelid
HAVING bool_and(a.attnotnull)
ORDER BY count(*), i.indexrelid
"""


TABLES_SQL = """
SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'dblog')
  AND n.nspname NOT LIKE 'pg_toast%%' AND NOT c.relispartition
ORDER BY 1, 2
"""


def quote(name: str) -> str:
    """An identifier quoted for SQL text (statements printed as fixes, regclass literals)."""
    return '"' + name.replace('"', '""') + '"'


def regclass(table: TableId) -> str:
    return f"{quote(table.schema)}.{quote(table.name)}"


def matches(table: TableId, patterns: Sequence[str]) -> bool:
    """``schema.table`` patterns where ``*`` stands only for a whole schema or table name (the
    form wal2json's add-tables understands, so dumps and the log select the same tables)."""
    if not patterns:
        return True
    for pattern in patterns:
        schema, _, name = pattern.partition(".")
        if schema in ("*", table.schema) and name in ("*", table.name):
            return True
    return False


def list_tables(conn: psycopg.Connection, patterns: Sequence[str],
                exclude: TableId | None = None) -> list[TableId]:
    try:
        rows = conn.execute(TABLES_SQL).fetchall()
    except psycopg.Error as exc:
        raise classify(exc, "listing tables") from exc
    tables = (TableId(s, n) for s, n in rows)
    return [t for t in tables if t != exclude and matches(t, patterns)]


def add_tables_option(patterns: Sequence[str]) -> str:
    """wal2json's add-tables value. wal2json splits it at commas and white space and takes a
    backslash as escaping the next character, so backslashes, white space, quotes, commas,
    periods and * in names are escaped (an unescaped backslash was dropped: the table never
    matched and its changes never arrived)."""
    def escape(part: str) -> str:
        if part == "*":
            return part
        return "".join(f"\\{c}" if c in "\\',.*" or c.isspace() else c for c in part)

    return ",".join(f"{escape(s)}.{escape(n)}" for s, _, n in (p.partition(".") for p in patterns))


TOAST_SHAPE_SQL = """
SELECT c.relreplident = 'f',
       coalesce(array_agg(a.attname::text) FILTER (WHERE a.attlen = -1 AND a.attstorage <> 'p'),
                '{}')
FROM pg_class c
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.oid = to_regclass(%s)
GROUP BY c.relreplident
"""

# to_regclass: NULL, not an error, for a relation (or schema) that is gone
LOG_COLUMNS_SQL = """
SELECT c.oid IS NOT NULL,
       coalesce(array_agg(a.attname::text ORDER BY a.attnum) FILTER (WHERE a.attnum IS NOT NULL),
                '{}')
FROM (SELECT to_regclass(%s) AS oid) c
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
GROUP BY c.oid
"""


@dataclass(frozen=True, slots=True)
class ToastShape:
    """What tells an unchanged TOAST value from a column an update was logged without.

    wal2json leaves a column out of an update's new tuple when its value is an unchanged
    TOAST pointer, and also when the column did not exist when the row was logged (a
    backlog read after an ``ADD COLUMN``). Only variable-length columns whose storage is not
    PLAIN can hold a TOAST pointer (``toastable``), and under REPLICA IDENTITY FULL
    (``full_identity``) the old tuple holds every column the row had, TOAST values inlined."""

    full_identity: bool
    toastable: frozenset[str]


def toast_shape(conn: psycopg.Connection, table: TableId) -> ToastShape | None:
    """None when no relation has that name now (dropped or renamed since it was logged)."""
    try:
        row = conn.execute(TOAST_SHAPE_SQL, (regclass(table),)).fetchone()
    except psycopg.Error as exc:
        raise classify(exc, f"reading the columns of {table}") from exc
    return None if row is None else ToastShape(bool(row[0]), frozenset(row[1]))


def column_names(conn: psycopg.Connection, table: TableId) -> tuple[str, ...] | None:
    """The columns a relation of that name has now; None when there is none (the log path
    asks for tables that may have been dropped or renamed since their changes were logged)."""
    try:
        row = conn.execute(LOG_COLUMNS_SQL, (regclass(table),)).fetchone()
    except psycopg.Error as exc:
        raise classify(exc, f"reading the columns of {table}") from exc
    return tuple(row[1]) if row is not None and row[0] else None


def unique_key_columns(conn: psycopg.Connection, table: TableId) -> tuple[str, ...] | None:
    """The columns of the smallest unique index on non-null columns (a key to suggest)."""
    row = conn.execute(_UNIQUE_INDEX_SQL, (regclass(table),)).fetchone()
    return None if row is None else tuple(row[0])


def table_info(
    conn: psycopg.Connection, table: TableId, key_columns: Sequence[str] | None
) -> TableInfo:
    try:
        columns = conn.execute(COLUMNS_SQL, (regclass(table),)).fetchall()
        keys = tuple(key_columns) if key_columns else tuple(
            r[0] for r in conn.execute(PK_SQL, (regclass(table),)).fetchall())
        estimate = conn.execute(  # rows, and bytes per row on disk (TOAST included)
            "SELECT reltuples::bigint, CASE WHEN reltuples > 0 THEN pg_table_size(oid) / "
            "reltuples END FROM pg_class WHERE oid = %s::regclass", (regclass(table),)).fetchone()
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName) as exc:
        raise DumpRequestError(
            f"unknown table {table}", fix="check the table name (schema.table) and the search path"
        ) from exc
    except psycopg.Error as exc:
        raise classify(exc, f"reading the columns of {table}") from exc
    names = [c[0] for c in columns]
    if not keys:
        raise DumpRequestError(
            f"table {table} has no primary key, so it cannot be dumped in key chunks",
            fix=_key_fix(conn, table))
    unknown = [k for k in keys if k not in names]
    if unknown:
        raise DumpRequestError(f"key columns {unknown} are not columns of {table}")
    extra: dict[str, object] = {"flavour": "postgresql"}  # bit(n) is a bit string here
    if estimate and estimate[1] is not None:
        extra["row_bytes"] = float(estimate[1])
    return TableInfo(table=table, columns=tuple(ColumnInfo(n, t) for n, t in columns),
                     key_columns=keys, estimated_rows=max(0, int(estimate[0])) if estimate else 0,
                     extra=extra)


def _key_fix(conn: psycopg.Connection, table: TableId) -> str:
    """What to do for a table without a key: name the columns of a unique index on non-null
    columns in source.key_columns when there is one (never a column merely guessed)."""
    try:
        unique = unique_key_columns(conn, table)
    except psycopg.Error:
        unique = None
    if unique is None:
        return (f"add a primary key (ALTER TABLE {regclass(table)} ADD PRIMARY KEY (...)); no "
                "unique index on non-null columns exists to name in source.key_columns")
    return (f"add a primary key, or name its unique index's columns in source.key_columns: "
            f"key_columns: {{\"{table}\": {list(unique)}}}")
