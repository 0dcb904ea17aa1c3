"""What ``dblog check`` verifies about the captured tables, each problem with its fix:

* every table named exactly in ``source.tables`` exists (a typo otherwise captures nothing);
* every captured table has a key: a primary key, or ``source.key_columns`` (without one it
  cannot be dumped and its events carry no key); the fix names a unique index on non-null
  columns when there is one, never a guessed column;
* ``source.key_columns`` are unique and never null: backed by a unique index on non-null
  columns, or at least without repeated or null values among the first rows (a bounded query: a
  dump by a non-unique key reads one row per value and drops the rest).

At start the missing tables are logged as warnings (a table created later is captured).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dblog.core.model import TableId
from dblog.errors import DblogError
from dblog.spi import Finding
from dblog.spi.findings import missing_tables

from . import catalog
from .db import query, quote

UNIQUE_SAMPLE_ROWS = 100_000
"""Rows of a table read to look for repeated or null key values (bounded: a check must not
scan a large table)."""

QUALIFIED = "database.table"


def _repeats_sql(table: TableId, columns: Sequence[str]) -> str:
    """One row when some key value among the first UNIQUE_SAMPLE_ROWS rows repeats or is
    null. GROUP BY compares under the columns' collations, as the key does."""
    keys = ", ".join(quote(c) for c in columns)
    nulls = " OR ".join(f"{quote(c)} IS NULL" for c in columns)
    sample = (f"SELECT {keys} FROM {quote(table.schema)}.{quote(table.name)} "
              f"LIMIT {UNIQUE_SAMPLE_ROWS}")
    return (f"SELECT 1 FROM ({sample}) s GROUP BY {keys} "
            f"HAVING COUNT(*) > 1 OR MAX({nulls}) = 1 LIMIT 1")


def key_uniqueness(conn: Any, table: TableId, columns: Sequence[str]) -> list[Finding]:
    """``source.key_columns`` of ``table``: backed by a unique index on non-null columns, or
    at least without repeated or null values among the first UNIQUE_SAMPLE_ROWS rows."""
    unique = catalog.unique_key_columns(conn, table)
    if unique is not None and set(unique) <= set(columns):
        return []
    bad = query(conn, _repeats_sql(table, columns), doing=f"checking the key columns of {table}")
    name = f"{quote(table.schema)}.{quote(table.name)}"
    suggestion = f"key_columns: {{\"{table}\": {list(unique)}}}" if unique else \
        f"CREATE UNIQUE INDEX ... ON {name} ({', '.join(quote(c) for c in columns)})"
    if bad:
        return [Finding("error", f"source.key_columns {list(columns)} of {table} are not a key: "
                        "some values repeat or are null, and a dump would read one row per "
                        "value", f"use a unique, non-null key: {suggestion}")]
    return [Finding("warning", f"source.key_columns {list(columns)} of {table} have no unique "
                    f"index on non-null columns; no repeated or null values among the first "
                    f"{UNIQUE_SAMPLE_ROWS} rows", f"make sure they are a key: {suggestion}")]


def _table_findings(conn: Any, table: TableId, key_columns: Sequence[str] | None
                    ) -> list[Finding]:
    """A table without a usable key (from the catalog's own refusal), or key columns that
    are not unique."""
    try:
        catalog.table_info(conn, table, key_columns)
    except DblogError as exc:
        return [Finding("error", exc.message, exc.fix)]
    if not key_columns:
        return []
    try:
        return key_uniqueness(conn, table, key_columns)
    except DblogError as exc:
        return [Finding("error", f"cannot read {table} to check its source.key_columns: "
                        f"{exc.message}", exc.fix or f"GRANT SELECT ON {quote(table.schema)}.* "
                        "TO <dblog user>")]


def table_findings(conn: Any, patterns: Sequence[str], tables: Sequence[TableId],
                   key_columns: Mapping[TableId, Sequence[str]]) -> list[Finding]:
    """Every finding of this module for the captured ``tables`` (as ``source.tables``
    selects them)."""
    findings = missing_tables(patterns, set(tables), qualified=QUALIFIED)
    for table in tables:
        findings.extend(_table_findings(conn, table, key_columns.get(table)))
    return findings


def start_warnings(patterns: Sequence[str], tables: Sequence[TableId]) -> list[Finding]:
    """What ``run`` logs at start: the exact names of tables that do not exist (yet)."""
    return missing_tables(patterns, set(tables), at_start=True, qualified=QUALIFIED)
