"""A column dropped while a table is dumped: the PostgreSQL chunk reader's cached queries name
it, the server answers 42703, the reader raises TableChanged (the scheduler then reads the
table's metadata again), and ``forget_table`` drops the cached queries so the chunk is read
again with the fresh metadata."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from dblog.app.pipeline import Pipeline
from dblog.connectors.postgres import PostgresConnector
from dblog.connectors.postgres.chunks import PostgresChunkReader
from dblog.connectors.postgres.setup import ensure_watermark_table
from dblog.core.model import EncodedRow, TableId
from dblog.engine import EngineSettings
from dblog.errors import TableChanged
from dblog.outputs.jsonl import JsonlOutput
from dblog.spi.source import ForgettingChunkReader

from .pgutil import dump_state, read_events, wait_until

T = TableId("public", "t")


def test_dropped_column_is_table_changed_and_forget_table_reads_it_fresh(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text, gone int)")
        conn.execute("INSERT INTO t SELECT g, 'v' || g, g FROM generate_series(1, 10) g")
    reader = PostgresChunkReader(pg_dsn, ["public.t"], {})
    try:
        assert isinstance(reader, ForgettingChunkReader)
        info = reader.table_info(T)
        for _ in range(6):  # past psycopg's prepare threshold: a server-side prepared plan
            first = reader.read_chunk(info, None, None, 3)
        assert [k for k, _ in first.rows] == [(1,), (2,), (3,)]
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE t DROP COLUMN gone")
        with pytest.raises(TableChanged, match="gone"):
            reader.read_chunk(info, (3,), None, 3)
        with pytest.raises(TableChanged, match="gone"):
            reader.max_key(info)
        reader.forget_table(T)
        fresh = reader.table_info(T)
        assert [c.name for c in fresh.columns] == ["id", "v"]
        again = reader.read_chunk(fresh, (3,), None, 3)
        assert [(k, r.decode() if isinstance(r, EncodedRow) else r) for k, r in again.rows] \
            == [((4,), {"id": 4, "v": "v4"}), ((5,), {"id": 5, "v": "v5"}),
                ((6,), {"id": 6, "v": "v6"})]
        assert reader.max_key(fresh) == (10,)
    finally:
        reader.close()


def test_dropped_column_in_a_pipelined_window_is_table_changed(pg_dsn: str) -> None:
    watermark = TableId("dblog", "watermark")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text, gone int)")
        conn.execute("INSERT INTO t SELECT g, 'v' || g, g FROM generate_series(1, 10) g")
        ensure_watermark_table(conn, watermark, "x")
    reader = PostgresChunkReader(pg_dsn, ["public.t"], {}, watermark, "x")
    try:
        info = reader.table_info(T)
        assert len(reader.start_chunk_window("l", "h", info, None, None, 3).wait().rows) == 3
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE t DROP COLUMN gone")
        with pytest.raises(TableChanged, match="gone"):
            reader.start_chunk_window("l", "h", info, (3,), None, 3).wait()
        reader.forget_table(T)
        fresh = reader.table_info(T)
        assert [k for k, _ in reader.start_chunk_window("l", "h", fresh, (3,), None, 3)
                .wait().rows] == [(4,), (5,), (6,)]
    finally:
        reader.close()


def test_a_column_dropped_while_a_pipeline_dumps_is_read_again(pg_dsn: str,
                                                               tmp_path: Path) -> None:
    """End to end, with the chunk worker (its own reader must forget the table too): the dump
    ends done with every row, a new dump in the same run too, and the rows read after the
    DROP lack the column."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v int, w int)")
        conn.execute("INSERT INTO t SELECT g, g, g FROM generate_series(1, 20) g")
    pipeline = Pipeline(
        PostgresConnector({"dsn": pg_dsn, "slot": "dc", "tables": ["public.t"]}, "dc"),
        [JsonlOutput({"path": str(tmp_path / "o.jsonl")})],
        state_path=str(tmp_path / "s.json"),
        settings=EngineSettings(chunk_size=1, chunk_delay_s=0.2, flush_interval_s=0.1)).start()
    try:
        first = pipeline.dump(["public.t"])
        def two_chunks() -> bool:
            status = pipeline.dump_status(first)
            return status is not None and status["tables"][0]["chunks"] >= 2

        wait_until(two_chunks, 30, "two chunks")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE t DROP COLUMN w")
        wait_until(lambda: dump_state(pipeline, first) != "running", 60, "the dump's end")
        assert dump_state(pipeline, first) == "done", pipeline.dump_status(first)
        second = pipeline.dump(["public.t"])
        wait_until(lambda: dump_state(pipeline, second) not in ("queued", "running"), 60,
                   "the second dump")
        assert dump_state(pipeline, second) == "done", pipeline.dump_status(second)
    finally:
        pipeline.stop()
    reads = [e for e in read_events(tmp_path / "o.jsonl") if e["op"] == "read"]
    by_dump: dict[str, list[int]] = {}
    for event in reads:
        by_dump.setdefault(event["dump_id"], []).append(event["key"][0])
    assert sorted(by_dump[first]) == list(range(1, 21))
    assert sorted(by_dump[second]) == list(range(1, 21))
    assert all("w" not in e["after"] for e in reads if e["dump_id"] == second)
