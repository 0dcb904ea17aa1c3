"""The pipelined chunk window on PostgreSQL: L, the SELECT and H sent in one round trip must
still run as three transactions, in that order, the SELECT seeing what committed before it."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from dblog.connectors.postgres import PostgresConnector
from dblog.core.model import EncodedRow, RowImage, TableId
from dblog.errors import DumpRequestError

pytestmark = pytest.mark.integration


def _database(dsn: str) -> str:
    return dsn.rsplit("dbname=", 1)[-1].split()[0].lower()


@contextlib.contextmanager
def _prepared(dsn: str) -> Iterator[PostgresConnector]:
    """A connector with its watermark row, over a table t of 30 rows; closed afterwards."""
    connector = PostgresConnector(
        {"dsn": dsn, "slot": "dblog_" + _database(dsn), "tables": ["public.*"]}, "win")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 30) g")
    connector.prepare()
    try:
        yield connector
    finally:
        connector.close()


def _watermark_transactions(dsn: str, slot: str) -> list[tuple[int, str]]:
    """(xid, value) of each watermark update in the slot, in commit order; every update is
    checked to be alone in its transaction."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT data FROM pg_logical_slot_get_changes(%s, NULL, NULL, 'format-version', "
            "'2', 'include-xids', '1', 'add-tables', 'dblog.watermark')", (slot,)).fetchall()
    found: list[tuple[int, str]] = []
    in_tx: list[str] = []
    for (data,) in rows:
        msg = json.loads(data)
        if msg["action"] == "B":
            in_tx = []
        elif msg["action"] == "U":
            value = next(c["value"] for c in msg["columns"] if c["name"] == "value")
            in_tx.append(value)
            found.append((msg["xid"], value))
        elif msg["action"] == "C":
            assert len(in_tx) <= 1, f"watermarks {in_tx} committed in one transaction"
    return found


def test_low_select_high_are_three_transactions_in_order(pg_dsn: str) -> None:
    with _prepared(pg_dsn) as connector:
        slot = "win_" + _database(pg_dsn)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'wal2json')", (slot,))
        reader = connector.chunk_reader()
        try:
            info = reader.table_info(TableId("public", "t"))
            first = reader.start_chunk_window("L-1", "H-1", info, None, None, 10).wait()
            second = reader.start_chunk_window("L-2", "H-2", info, first.rows[-1][0], (25,),
                                               10).wait()
        finally:
            reader.close()
        assert [k for k, _ in first.rows] == [(i,) for i in range(1, 11)]
        assert [k for k, _ in second.rows] == [(i,) for i in range(11, 21)]
        row = first.rows[0][1]
        assert isinstance(row, EncodedRow) and row.json == b'{"id":1,"v":"v1"}'  # column order
        marks = _watermark_transactions(pg_dsn, slot)
        assert [v for _, v in marks] == ["L-1", "H-1", "L-2", "H-2"]
        assert len({xid for xid, _ in marks}) == 4


def test_the_select_sees_a_row_committed_after_the_low_watermark(pg_dsn: str) -> None:
    """A writer waits for L to commit (it blocks on L's row lock), then commits a new row before
    the SELECT starts; the SELECT, whose snapshot is taken after L, must see it."""
    with _prepared(pg_dsn) as connector:
        reader = connector.chunk_reader()
        info = reader.table_info(TableId("public", "t"))
        with psycopg.connect(pg_dsn) as blocker:
            # hold the watermark row: L waits for it, so the SELECT cannot start before commit
            blocker.execute("UPDATE dblog.watermark SET value = 'held' WHERE name = 'win'")
            pending = reader.start_chunk_window("L-1", "H-1", info, (29,), None, 10)
            blocker.execute("INSERT INTO t VALUES (31, 'late')")
            timer = threading.Timer(0.2, blocker.commit)
            timer.start()
            chunk = pending.wait()
            timer.join()
        reader.close()
        assert [k for k, _ in chunk.rows] == [(30,), (31,)]


def test_a_failing_select_leaves_the_connection_usable(pg_dsn: str) -> None:
    with _prepared(pg_dsn) as connector:
        reader = connector.chunk_reader()
        try:
            info = reader.table_info(TableId("public", "t"))
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute("DROP TABLE t")
            with pytest.raises(DumpRequestError, match="does not exist"):
                reader.start_chunk_window("L-1", "H-1", info, None, None, 10).wait()
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
                conn.execute("INSERT INTO t VALUES (1, 'again')")
            chunk = reader.start_chunk_window("L-2", "H-2", info, None, None, 10).wait()
            assert [_decoded(r) for _, r in chunk.rows] == [{"id": 1, "v": "again"}]
        finally:
            reader.close()


def _decoded(row: RowImage) -> dict[str, Any]:
    return row.decode() if isinstance(row, EncodedRow) else row
