"""The log holds changes of a table that was dropped or renamed before the reader decoded them:
the reader emits them as logged and goes on (before, the first UPDATE's catalog lookup raised
DumpRequestError out of poll() and every restart replayed it)."""

from __future__ import annotations

import logging

import psycopg
import pytest

from dblog.connectors.postgres import PostgresConnector
from dblog.core.model import ChangeEvent, LogItem, Op, TableId


def _read_until(connector: PostgresConnector, table: str) -> list[ChangeEvent]:
    reader = connector.log_reader()
    items: list[LogItem] = []
    try:
        reader.start(None)
        for _ in range(50):
            items += reader.poll(0.2)
            if any(isinstance(i, ChangeEvent) and i.table and i.table.name == table
                   for i in items):
                break
    finally:
        reader.close()
        connector.close()
    return [i for i in items if isinstance(i, ChangeEvent) and i.table is not None]


def _backlog(dsn: str, slot: str, tables: list[str], changes: list[str]
             ) -> PostgresConnector:
    """A connector whose slot was created after ``tables`` and before ``changes`` ran (the
    changes wait in the log, as for a stopped or lagging pipeline)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in tables:
            conn.execute(statement)
    connector = PostgresConnector({"dsn": dsn, "slot": slot, "tables": ["public.*"]})
    connector.prepare()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in changes:
            conn.execute(statement)
    return connector


def test_update_of_a_dropped_table_is_emitted_as_logged(
        pg_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    connector = _backlog(pg_dsn, "dropped", [
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "CREATE TABLE r (id int PRIMARY KEY, v text)"], [
        "INSERT INTO t VALUES (1, 'a')", "UPDATE t SET v = 'b' WHERE id = 1",
        "INSERT INTO r VALUES (5, 'x')", "UPDATE r SET v = 'y' WHERE id = 5",
        "DROP TABLE t",  # while the pipeline is stopped or lagging
        "DROP SCHEMA public CASCADE",  # r goes with its whole schema
        "CREATE SCHEMA public", "CREATE TABLE u (id int PRIMARY KEY)",
        "INSERT INTO u VALUES (7)"])
    with caplog.at_level(logging.WARNING, "dblog.connectors.postgres"):
        events = _read_until(connector, "u")
    updates = [(e.table, e.key, e.after, e.unchanged) for e in events if e.op is Op.UPDATE]
    assert updates == [(TableId("public", "t"), (1,), {"id": 1, "v": "b"}, ()),
                       (TableId("public", "r"), (5,), {"id": 5, "v": "y"}, ())]
    assert [(e.table, e.key) for e in events if e.op is Op.INSERT][-1] == \
        (TableId("public", "u"), (7,))
    assert "public.t" in caplog.text and "no longer" in caplog.text


def test_rename_swap_reads_the_new_tables_columns(pg_dsn: str) -> None:
    """t -> t_old, t_new -> t before the backlog is decoded: wal2json names the change by the
    name it was logged under (t), and the catalog's t is now another table. The row is emitted
    as logged; the columns of today's t that the row lacks and that could hold a TOAST value
    are reported unchanged (too many, never a value passed off as absent)."""
    connector = _backlog(pg_dsn, "swap", [
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "CREATE TABLE t_new (id int PRIMARY KEY, w text, z int)"], [
        "INSERT INTO t VALUES (1, 'a')", "UPDATE t SET v = 'b' WHERE id = 1",
        "ALTER TABLE t RENAME TO t_old", "ALTER TABLE t_new RENAME TO t",
        "CREATE TABLE u (id int PRIMARY KEY)", "INSERT INTO u VALUES (7)"])
    events = _read_until(connector, "u")
    updates = [(e.table, e.after, e.unchanged) for e in events if e.op is Op.UPDATE]
    assert updates == [(TableId("public", "t"), {"id": 1, "v": "b"}, ("w",))]
