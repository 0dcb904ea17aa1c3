"""Catalog queries: tables, columns with their types and collations, primary keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dblog.core.model import ColumnInfo, TableId, TableInfo
from dblog.errors import DumpRequestError

from .db import query
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
            f"table {table} has no primary key, so it cannot be dumped in key chunks",
            fix=f"add a primary key, or name a unique non-null key in source.key_columns "
                f"(for example key_columns: {{\"{table}\": [\"{names[0]}\"]}})")
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
