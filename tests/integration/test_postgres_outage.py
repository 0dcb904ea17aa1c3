"""A source outage (PostgreSQL restarted while capturing and dumping) is retried: capture
resumes from the committed state and nothing is lost (SPEC 8)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from dblog.app.pipeline import Pipeline
from dblog.connectors.postgres import PostgresConnector
from dblog.connectors.postgres.positions import Lsn
from dblog.engine import EngineSettings
from dblog.harness.postgres import PostgresServer, start_postgres
from dblog.outputs.jsonl import JsonlOutput

from .pgutil import (
    check_commit_order,
    check_no_time_travel,
    current_lsn,
    dump_state,
    read_events,
    replayed,
    source_rows,
    wait_until,
)

pytestmark = pytest.mark.integration


@pytest.fixture()
def own_server() -> Iterator[PostgresServer]:
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()


def _writer(dsn: str, stop: threading.Event, done: list[int]) -> None:
    """Updates and inserts; reconnects after the outage (failed statements are not counted)."""
    n = 0
    while not stop.is_set():
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
                while not stop.is_set():
                    n += 1
                    conn.execute("INSERT INTO t VALUES (%s, nextval('ver_seq'), 'w') ON CONFLICT "
                                 "(id) DO UPDATE SET ver = nextval('ver_seq')", (n % 3000,))
                    done[0] += 1
        except psycopg.OperationalError:
            time.sleep(0.2)


def test_source_restart_is_retried_without_loss(own_server: PostgresServer,
                                                tmp_path: Path) -> None:
    dsn = own_server.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE SEQUENCE ver_seq")
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, ver bigint NOT NULL, v text)")
        conn.execute("INSERT INTO t SELECT g, nextval('ver_seq'), 'init' "
                     "FROM generate_series(1, 2000) g")
    pipeline = Pipeline(
        PostgresConnector({"dsn": dsn, "slot": "outage", "tables": ["public.*"]}, "outage"),
        [JsonlOutput({"path": str(tmp_path / "out.jsonl")})], state_path=str(tmp_path / "s.json"),
        settings=EngineSettings(chunk_size=50, chunk_delay_s=0.01, flush_interval_s=0.2,
                                heartbeat_interval_s=1))
    pipeline.start()
    stop, done = threading.Event(), [0]
    writer = threading.Thread(target=_writer, args=(dsn, stop, done), daemon=True)
    writer.start()
    try:
        dump_id = pipeline.dump(["public.t"])
        wait_until(lambda: (pipeline.dump_status(dump_id) or {}).get("tables", [{}])[0]
                   .get("chunks", 0) >= 3, 60, "a few chunks")
        own_server.restart(down_s=1.0)
        wait_until(lambda: dump_state(pipeline, dump_id) == "done", 180,
                   "the dump to finish after the outage")
        stop.set()
        writer.join(10)
        target = current_lsn(dsn)
        wait_until(lambda: Lsn.parse(pipeline.status()["committed_position"] or "0/0") >= target,
                   60, "the capture to catch up")
    finally:
        stop.set()
        pipeline.stop()
    events = read_events(tmp_path / "out.jsonl")
    assert done[0] > 50
    assert pipeline.restarts >= 1, "the outage should have restarted the engine"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    check_commit_order(events)
    check_no_time_travel(events)
    assert replayed(events) == source_rows(dsn, ["public.t"])
