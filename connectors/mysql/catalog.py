"""Catalog queries: tables, columns with their types and collations, primary keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dblog.core.model import ColumnInfo, TableId, TableInfo
from dblog.errors import DblogError, DumpRequestError

from .db import query, quote
from .types import base_type, unsupported

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")

COLUMNS_SQL = """
SELECT COLUMN_NAME, COLUMN_TYPE, COLLATION_NAME FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION
"""
PK_SQL = """
SELECT COLUMN_NAME FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX
"""
TABLES_SQL = """
SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES
WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema',
  'performance_schema', 'sys') ORDER BY 1, 2
"""


def matches(table: TableId, patterns: Sequence[str]) -> bool:
    """``database.table`` patterns where ``*`` stands for a whole database or table name."""
    if not patterns:
        return table.schema not in SYSTEM_SCHEMAS
    for pattern in patterns:
        schema, _, name = pattern.partition(".")
        if schema in ("*", table.schema) and name in ("*", table.name):
            return True
    return False


def list_tables(conn: Any, patterns: Sequence[str], exclude: TableId | None) -> list[TableId]:
    rows = query(conn, TABLES_SQL, doing="listing tables")
    tables = (TableId(str(s), str(n)) for s, n in rows)
    return [t for t in tables if t != exclude and t.schema != (exclude.schema if exclude else "")
            and matches(t, patterns)]


def column_types(conn: Any, table: TableId) -> dict[str, str]:
    """Column name -> base type (``uuid``, ``int``, ...), as the catalog declares them now."""
    rows = query(conn, COLUMNS_SQL, (table.schema, table.name), f"reading the columns of {table}")
    return {str(r[0]): base_type(_text(r[1])) for r in rows}


def unsupported_columns(conn: Any, table: TableId) -> list[str]:
    """``name (type)`` of each column whose type the connector refuses (types.unsupported)."""
    rows = query(conn, COLUMNS_SQL, (table.schema, table.name), f"reading the columns of {table}")
    return [f"{r[0]} ({_text(r[1])})" for r in rows if unsupported(_text(r[1]))]


UNIQUE_INDEXES_SQL = """
SELECT s.INDEX_NAME, s.COLUMN_NAME, c.IS_NULLABLE FROM information_schema.STATISTICS s
LEFT JOIN information_schema.COLUMNS c ON c.TABLE_SCHEMA = s.TABLE_SCHEMA
  AND c.TABLE_NAME = s.TABLE_NAME AND c.COLUMN_NAME = s.COLUMN_NAME
WHERE s.TABLE_SCHEMA = %s AND s.TABLE_NAME = %s AND s.NON_UNIQUE = 0
ORDER BY s.INDEX_NAME, s.SEQ_IN_INDEX
"""


def unique_key_columns(conn: Any, table: TableId) -> tuple[str, ...] | None:
    """The columns of the smallest unique index on non-null columns (the primary key if it is
    one of the smallest), or None: the only key ever suggested. An index on an expression
    (MySQL 8, no column name) or with a nullable column does not qualify."""
    rows = query(conn, UNIQUE_INDEXES_SQL, (table.schema, table.name),
                 f"reading the unique indexes of {table}")
    indexes: dict[str, list[str | None]] = {}
    for index, column, nullable in rows:
        ok = column is not None and _text(nullable) == "NO"
        indexes.setdefault(_text(index), []).append(_text(column) if ok else None)
    keys = [(len(cols), name != "PRIMARY", name, tuple(c for c in cols if c is not None))
            for name, cols in indexes.items() if None not in cols]
    return min(keys)[3] if keys else None


def key_fix(conn: Any, table: TableId) -> str:
    """What to do for a table without a key: name the columns of a unique index on non-null
    columns in source.key_columns when there is one (never a column merely guessed)."""
    name = f"{quote(table.schema)}.{quote(table.name)}"
    try:
        unique = unique_key_columns(conn, table)
    except DblogError:  # the indexes cannot be read: suggest nothing rather than guess
        return (f"add a primary key (ALTER TABLE {name} ADD PRIMARY KEY (...)), or name a "
                "unique, non-null key in source.key_columns")
    if unique is None:
        return (f"add a primary key (ALTER TABLE {name} ADD PRIMARY KEY (...)); no unique "
                "index on non-null columns exists to name in source.key_columns")
    return (f"add a primary key, or name its unique index's columns in source.key_columns: "
            f"key_columns: {{\"{table}\": {list(unique)}}}")


def table_info(conn: Any, table: TableId, key_columns: Sequence[str] | None) -> TableInfo:
    doing = f"reading the columns of {table}"
    columns = query(conn, COLUMNS_SQL, (table.schema, table.name), doing)
    if not columns:
        raise DumpRequestError(f"unknown table {table}",
                               fix="check the table name (database.table)")
    names = [str(c[0]) for c in columns]
    keys = tuple(key_columns) if key_columns else tuple(
        str(r[0]) for r in query(conn, PK_SQL, (table.schema, table.name), doing))
    if not keys:
        raise DumpRequestError(
            f"table {table} has no primary key, so it cannot be dumped in key chunks and its "
            "events carry no key", fix=key_fix(conn, table))
    unknown = [k for k in keys if k not in names]
    if unknown:
        raise DumpRequestError(f"key columns {unknown} are not columns of {table}")
    estimate = query(conn, "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE "
                     "TABLE_SCHEMA = %s AND TABLE_NAME = %s", (table.schema, table.name), doing)
    collations = {str(c[0]): (str(c[2]) if c[2] else None) for c in columns}
    return TableInfo(table=table,
                     columns=tuple(ColumnInfo(str(n), _text(t)) for n, t, _ in columns),
                     key_columns=keys,
                     estimated_rows=int(estimate[0][0] or 0) if estimate else 0,
                     extra={"collations": collations})


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, (bytes, bytearray)) else str(value)
