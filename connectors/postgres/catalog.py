"""Catalog queries: columns, primary keys, tables, estimates."""

from __future__ import annotations

from collections.abc import Sequence

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

TABLES_SQL = """
SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'dblog')
  AND n.nspname NOT LIKE 'pg_toast%%' AND NOT c.relispartition
ORDER BY 1, 2
"""


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def regclass(table: TableId) -> str:
    return f"{_quote(table.schema)}.{_quote(table.name)}"


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


def column_names(conn: psycopg.Connection, table: TableId) -> tuple[str, ...]:
    try:
        return tuple(r[0] for r in conn.execute(COLUMNS_SQL, (regclass(table),)).fetchall())
    except psycopg.Error as exc:
        raise classify(exc, f"reading the columns of {table}") from exc


def table_info(
    conn: psycopg.Connection, table: TableId, key_columns: Sequence[str] | None
) -> TableInfo:
    try:
        columns = conn.execute(COLUMNS_SQL, (regclass(table),)).fetchall()
        keys = tuple(key_columns) if key_columns else tuple(
            r[0] for r in conn.execute(PK_SQL, (regclass(table),)).fetchall())
        estimate = conn.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = "
                                "%s::regclass", (regclass(table),)).fetchone()
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName) as exc:
        raise DumpRequestError(
            f"unknown table {table}", fix="check the table name (schema.table) and the search path"
        ) from exc
    except psycopg.Error as exc:
        raise classify(exc, f"reading the columns of {table}") from exc
    names = [c[0] for c in columns]
    if not keys:
        example = names[0] if names else "id"
        raise DumpRequestError(
            f"table {table} has no primary key, so it cannot be dumped in key chunks",
            fix=f"add a primary key, or name a unique non-null key in source.key_columns "
                f"(for example key_columns: {{\"{table}\": [\"{example}\"]}})",
        )
    unknown = [k for k in keys if k not in names]
    if unknown:
        raise DumpRequestError(f"key columns {unknown} are not columns of {table}")
    return TableInfo(table=table, columns=tuple(ColumnInfo(n, t) for n, t in columns),
                     key_columns=keys, estimated_rows=max(0, int(estimate[0])) if estimate else 0)
