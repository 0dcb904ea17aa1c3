"""The central correctness test (SPEC section 10) on PostgreSQL: I1-I3 under concurrent writers,
and the drop rule shown with DML injected right after L and right before H."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from dblog.connectors.postgres import PostgresConnector
from dblog.dumps import ChunkPlan
from dblog.engine import EngineSettings, PhaseHooks
from dblog.outputs.jsonl import JsonlOutput
from dblog.pipeline import Pipeline
from dblog.positions import Lsn

from .pgutil import (
    check_commit_order,
    check_no_time_travel,
    current_lsn,
    read_events,
    replayed,
    source_rows,
    wait_until,
)
from .workload import TABLES, Writers, create_schema

pytestmark = pytest.mark.integration


def _pipeline(dsn: str, tmp: Path, hooks: PhaseHooks | None = None, chunk: int = 50) -> Pipeline:
    connector = PostgresConnector({"dsn": dsn, "slot": "central", "tables": ["public.*"]}, "i1")
    settings = EngineSettings(chunk_size=chunk, flush_interval_s=0.2, heartbeat_interval_s=1)
    return Pipeline(connector, [JsonlOutput({"path": str(tmp / "out.jsonl")})],
                    state_path=str(tmp / "state.json"), settings=settings, hooks=hooks)


def _catch_up(pipeline: Pipeline, dsn: str) -> None:
    target = current_lsn(dsn)

    def caught_up() -> bool:
        position = pipeline.status()["committed_position"]
        return position is not None and Lsn.parse(position) >= target

    wait_until(caught_up, 60, f"the committed position to reach {target}")


def test_concurrent_writers_keep_i1_i2_i3(pg_dsn: str, tmp_path: Path) -> None:
    create_schema(pg_dsn, rows=2000)
    pipeline = _pipeline(pg_dsn, tmp_path).start()
    try:
        with Writers(pg_dsn, rows=2000, count=3) as writers:
            dump_id = pipeline.dump(TABLES)
            wait_until(lambda: pipeline.dump_status(dump_id)["state"] == "done", 240, "the dump")
        assert not writers.errors, writers.errors
        _catch_up(pipeline, pg_dsn)
    finally:
        pipeline.stop()
    events = read_events(tmp_path / "out.jsonl")
    assert writers.committed > 100, "the writers should have committed while the dump ran"
    # transactions whose statements matched no row leave no events, so compare loosely
    assert check_commit_order(events) > writers.committed // 4
    reads = check_no_time_travel(events)
    assert reads > 1000, f"only {reads} read events: the dump did not run"
    expected = source_rows(pg_dsn, TABLES)
    assert replayed(events) == expected
    chunks = pipeline.dump_status(dump_id)
    assert chunks is not None and sum(t["chunks"] for t in chunks["tables"]) >= 90


def test_dml_inside_the_window_drops_the_conflicting_chunk_rows(pg_dsn: str,
                                                               tmp_path: Path) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE SEQUENCE ver_seq")
        conn.execute("CREATE TABLE t_int (id int PRIMARY KEY, ver bigint NOT NULL, v text)")
        conn.execute("INSERT INTO t_int SELECT g, nextval('ver_seq'), 'init' "
                     "FROM generate_series(1, 500) g")
    writer = psycopg.connect(pg_dsn, autocommit=True)
    injected: dict[str, set[int]] = {"after_low": set(), "before_high": set(), "moved": set(),
                                     "updated": set()}

    def first(plan: ChunkPlan) -> int:
        return 0 if plan.after is None else int(plan.after[0])

    def after_low(plan: ChunkPlan) -> None:
        base = first(plan)
        writer.execute("UPDATE t_int SET ver = nextval('ver_seq'), v = 'after-low' WHERE id = %s",
                       (base + 1,))
        writer.execute("UPDATE t_int SET id = id + 100000, ver = nextval('ver_seq') "
                       "WHERE id = %s", (base + 4,))
        injected["after_low"].add(base + 1)
        injected["moved"].add(base + 4)

    def before_high(plan: ChunkPlan) -> None:
        base = first(plan)
        writer.execute("UPDATE t_int SET ver = nextval('ver_seq'), v = 'before-high' "
                       "WHERE id = %s", (base + 2,))
        writer.execute("DELETE FROM t_int WHERE id = %s", (base + 3,))
        injected["before_high"].update({base + 2, base + 3})
        injected["updated"].add(base + 2)

    pipeline = _pipeline(pg_dsn, tmp_path, PhaseHooks(after_low, before_high)).start()
    try:
        dump_id = pipeline.dump(["public.t_int"])
        wait_until(lambda: pipeline.dump_status(dump_id)["state"] == "done", 120, "the dump")
        _catch_up(pipeline, pg_dsn)
    finally:
        pipeline.stop()
        writer.close()
    events = read_events(tmp_path / "out.jsonl")
    read_keys = {e["key"][0] for e in events if e["op"] == "read" and e["dump_id"] == dump_id}
    touched = injected["after_low"] | injected["before_high"] | injected["moved"]
    assert len(injected["after_low"]) == 10  # 500 rows / 50 per chunk
    assert not read_keys & touched, f"conflicting chunk rows were emitted: {read_keys & touched}"
    assert read_keys == set(range(1, 501)) - touched
    updates = {e["key"][0] for e in events if e["op"] == "update"}
    assert injected["after_low"] | injected["updated"] <= updates
    check_no_time_travel(events)
    assert replayed(events) == source_rows(pg_dsn, ["public.t_int"])
