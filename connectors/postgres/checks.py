"""What ``dblog check`` and the start of ``run`` verify beyond the server settings, each
problem with its fix:

* every table named exactly in ``source.tables`` exists (a typo otherwise captures nothing);
* every captured table can have its updates and deletes logged with a key: a primary key, or
  ``source.key_columns`` under ``REPLICA IDENTITY FULL`` (without one wal2json only warns in
  the server log and the changes vanish), unless the user listed it in
  ``source.inserts_only``;
* ``source.key_columns`` are unique and never null (a bounded query over the first rows: a
  dump by a non-unique key reads one row per value and drops the rest);
* the role's rights on the watermark schema and table (or to create them).

``run`` refuses to start on any error finding (:func:`start_problems`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from dblog.core.model import TableId
from dblog.spi import Finding
from dblog.spi.findings import missing_tables

from . import catalog, setup

UNIQUE_SAMPLE_ROWS = 100_000
"""Rows of a table read to look for duplicate or null key values (bounded: a check must not
scan a large table)."""

_FACTS_SQL = """
SELECT n.nspname, c.relname, c.relreplident,
       EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary),
       EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisreplident)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg_toast%%' AND NOT c.relispartition
"""

@dataclass(frozen=True, slots=True)
class TableFacts:
    table: TableId
    replica_identity: str
    has_primary_key: bool
    has_identity_index: bool

    def logs_old_key(self) -> bool:
        """Whether updates and deletes reach the log with the old row's key (or all of it)."""
        identity = self.replica_identity
        return identity == "f" or (identity == "d" and self.has_primary_key) or (
            identity == "i" and self.has_identity_index)


def table_facts(conn: psycopg.Connection, patterns: Sequence[str],
                exclude: TableId) -> dict[TableId, TableFacts]:
    """The captured tables (as ``source.tables`` selects them) and what they log."""
    facts = {}
    for schema, name, identity, has_pk, has_index in conn.execute(_FACTS_SQL).fetchall():
        table = TableId(schema, name)
        if table != exclude and catalog.matches(table, patterns):
            facts[table] = TableFacts(table, str(identity), bool(has_pk), bool(has_index))
    return facts


def keyless_findings(facts: TableFacts, key_columns: Sequence[str] | None,
                     inserts_only: bool) -> list[Finding]:
    """A table whose updates and deletes cannot be logged, or whose events carry no key."""
    table = facts.table
    keyed = facts.has_primary_key or bool(key_columns)
    if facts.logs_old_key() and keyed:
        return []
    if inserts_only:
        return [Finding("warning", f"{table} is captured inserts only (source.inserts_only): "
                        "its events carry no key and its updates and deletes are lost")]
    why = "REPLICA IDENTITY NOTHING" if facts.replica_identity == "n" else "no primary key"
    if not facts.logs_old_key():
        message = (f"updates and deletes of {table} cannot be logged ({why}): PostgreSQL "
                   "writes no old key for them and they would vanish from the stream")
    else:
        message = f"events of {table} would carry no key ({why} and no source.key_columns)"
    return [Finding("error", message,
                    f"ALTER TABLE {catalog.regclass(table)} ADD PRIMARY KEY (...); or ALTER "
                    f"TABLE {catalog.regclass(table)} REPLICA IDENTITY FULL and name a unique "
                    f"key in source.key_columns; or list {table} in source.inserts_only to "
                    "capture its inserts only")]


def key_uniqueness(conn: psycopg.Connection, table: TableId,
                   columns: Sequence[str]) -> list[Finding]:
    """``source.key_columns`` of ``table``: backed by a unique index, or at least without
    duplicate or null values among the first UNIQUE_SAMPLE_ROWS rows."""
    unique = catalog.unique_key_columns(conn, table)
    if unique is not None and set(unique) <= set(columns):
        return []
    keys = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
    sample = sql.SQL("SELECT {keys} FROM {table} LIMIT {n}").format(
        keys=keys, table=sql.Identifier(table.schema, table.name),
        n=sql.Literal(UNIQUE_SAMPLE_ROWS))
    nulls = sql.SQL(" OR ").join(sql.SQL("{} IS NULL").format(sql.Identifier(c))
                                 for c in columns)
    query = sql.SQL("SELECT count(*) > 1 OR bool_or({nulls}) FROM ({sample}) s GROUP BY {keys} "
                    "HAVING count(*) > 1 OR bool_or({nulls}) LIMIT 1").format(
        nulls=nulls, sample=sample, keys=keys)
    bad = conn.execute(query).fetchone()
    suggestion = f"key_columns: {{\"{table}\": {list(unique)}}}" if unique else \
        f"CREATE UNIQUE INDEX ON {catalog.regclass(table)} ({', '.join(columns)})"
    if bad is not None:
        return [Finding("error", f"source.key_columns {list(columns)} of {table} are not a key: "
                        "some values repeat or are null, and a dump would read one row per "
                        "value", f"use a unique, non-null key: {suggestion}")]
    return [Finding("warning", f"source.key_columns {list(columns)} of {table} have no unique "
                    f"index; no repeated or null values among the first {UNIQUE_SAMPLE_ROWS} "
                    "rows", f"make sure they are a key: {suggestion}")]


def source_findings(conn: psycopg.Connection, patterns: Sequence[str],
                    key_columns: Mapping[TableId, Sequence[str]], inserts_only: Sequence[str],
                    watermark: TableId, at_start: bool = False) -> list[Finding]:
    """Every finding of this module for the captured tables and the watermark table."""
    facts = table_facts(conn, patterns, watermark)
    findings = missing_tables(patterns, facts, at_start)
    for table in sorted(facts):
        keys = key_columns.get(table)
        only_inserts = bool(inserts_only) and catalog.matches(table, inserts_only)
        findings.extend(keyless_findings(facts[table], keys, only_inserts))
        if keys:
            try:
                findings.extend(key_uniqueness(conn, table, keys))
            except psycopg.Error as exc:
                findings.append(Finding("error", f"cannot read {table} to check its "
                                        f"source.key_columns: {str(exc).strip()}",
                                        f"GRANT SELECT ON {catalog.regclass(table)} TO <role>"))
    findings.extend(setup.watermark_rights(conn, watermark))
    return findings
