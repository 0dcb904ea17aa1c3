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


def test_update_of_a_dropped_table_is_emitted_as_logged(
        pg_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("CREATE TABLE r (id int PRIMARY KEY, v text)")
    connector = PostgresConnector({"dsn": pg_dsn, "slot": "dropped", "tables": ["public.*"]})
    connector.prepare()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (1, 'a')")
        conn.execute("UPDATE t SET v = 'b' WHERE id = 1")
        conn.execute("INSERT INTO r VALUES (5, 'x')")
        conn.execute("UPDATE r SET v = 'y' WHERE id = 5")
        conn.execute("DROP TABLE t")  # while the pipeline is stopped or lagging
        conn.execute("DROP SCHEMA public CASCADE")  # r goes with its whole schema
        conn.execute("CREATE SCHEMA public")
        conn.execute("CREATE TABLE u (id int PRIMARY KEY)")
        conn.execute("INSERT INTO u VALUES (7)")
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
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("CREATE TABLE t_new (id int PRIMARY KEY, w text, z int)")
    connector = PostgresConnector({"dsn": pg_dsn, "slot": "swap", "tables": ["public.*"]})
    connector.prepare()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (1, 'a')")
        conn.execute("UPDATE t SET v = 'b' WHERE id = 1")
        conn.execute("ALTER TABLE t RENAME TO t_old")
        conn.execute("ALTER TABLE t_new RENAME TO t")
        conn.execute("CREATE TABLE u (id int PRIMARY KEY)")
        conn.execute("INSERT INTO u VALUES (7)")
    events = _read_until(connector, "u")
    updates = [(e.table, e.after, e.unchanged) for e in events if e.op is Op.UPDATE]
    assert updates == [(TableId("public", "t"), {"id": 1, "v": "b"}, ("w",))]
