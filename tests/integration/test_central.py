"""The central correctness test (SPEC section 10) on every source (PostgreSQL, MariaDB): I1-I3
under concurrent writers, and the drop rule shown with DML injected right after L and right
before H."""

from __future__ import annotations

from pathlib import Path

import pytest

from dblog.app.pipeline import Pipeline
from dblog.core.dumps import ChunkPlan
from dblog.engine import EngineSettings, PhaseHooks
from dblog.outputs.jsonl import JsonlOutput

from .pgutil import (
    check_commit_order,
    check_no_time_travel,
    dump_state,
    read_events,
    replayed,
    wait_until,
)
from .sources import Kit, kit

pytestmark = pytest.mark.integration
__all__ = ["kit"]


def _pipeline(kit: Kit, tmp: Path, hooks: PhaseHooks | None = None, chunk: int = 50) -> Pipeline:
    connector = kit.connector("central", "i1")
    settings = EngineSettings(chunk_size=chunk, flush_interval_s=0.2, heartbeat_interval_s=1)
    return Pipeline(connector, [JsonlOutput({"path": str(tmp / "out.jsonl")})],
                    state_path=str(tmp / "state.json"), settings=settings, hooks=hooks)


CHANGES = ("insert", "update", "delete")


def _catch_up(pipeline: Pipeline, kit: Kit) -> None:
    target = kit.current_position()

    def caught_up() -> bool:
        position = pipeline.status()["committed_position"]
        return position is not None and kit.parse_position(position) >= target

    wait_until(caught_up, 60, f"the committed position to reach {target}")


def test_concurrent_writers_keep_i1_i2_i3(kit: Kit, tmp_path: Path) -> None:
    kit.create_schema(rows=2000)
    pipeline = _pipeline(kit, tmp_path).start()
    try:
        with kit.writers(rows=2000, count=3) as writers:
            dump_id = pipeline.dump(kit.tables)
            wait_until(lambda: dump_state(pipeline, dump_id) == "done", 240, "the dump")
            # a fast dump may end before much was written: keep writing up to a fair amount
            wait_until(lambda: writers.committed > 100, 60, "100 writer transactions")
        assert not writers.errors, writers.errors
        _catch_up(pipeline, kit)
    finally:
        pipeline.stop()
    events = read_events(tmp_path / "out.jsonl")
    read_at = [i for i, e in enumerate(events) if e["op"] == "read"]
    during = sum(1 for e in events[read_at[0]:read_at[-1]] if e["op"] in CHANGES)
    assert during >= 20, f"only {during} changes were streamed while the dump ran"
    # transactions whose statements matched no row leave no events, so compare loosely
    assert check_commit_order(events, kit.parse_position) > writers.committed // 4
    reads = check_no_time_travel(events)
    assert reads > 1000, f"only {reads} read events: the dump did not run"
    expected = kit.source_rows(kit.tables)
    assert replayed(events) == expected
    chunks = pipeline.dump_status(dump_id)
    assert chunks is not None and sum(t["chunks"] for t in chunks["tables"]) >= 90


def test_dml_inside_the_window_drops_the_conflicting_chunk_rows(kit: Kit,
                                                               tmp_path: Path) -> None:
    kit.create_int_table(500)
    nextval = kit.nextval
    writer = kit.connect()
    injected: dict[str, set[int]] = {"after_low": set(), "before_high": set(), "moved": set(),
                                     "updated": set()}

    def first(plan: ChunkPlan) -> int:
        return 0 if plan.after is None else int(plan.after[0])

    def after_low(plan: ChunkPlan) -> None:
        base = first(plan)
        writer.execute(f"UPDATE t_int SET ver = {nextval}, v = 'after-low' WHERE id = %s",
                       (base + 1,))
        writer.execute(f"UPDATE t_int SET id = id + 100000, ver = {nextval} "
                       "WHERE id = %s", (base + 4,))
        injected["after_low"].add(base + 1)
        injected["moved"].add(base + 4)

    def before_high(plan: ChunkPlan) -> None:
        base = first(plan)
        writer.execute(f"UPDATE t_int SET ver = {nextval}, v = 'before-high' "
                       "WHERE id = %s", (base + 2,))
        writer.execute("DELETE FROM t_int WHERE id = %s", (base + 3,))
        injected["before_high"].update({base + 2, base + 3})
        injected["updated"].add(base + 2)

    pipeline = _pipeline(kit, tmp_path, PhaseHooks(after_low, before_high)).start()
    try:
        dump_id = pipeline.dump([kit.table("t_int")])
        wait_until(lambda: dump_state(pipeline, dump_id) == "done", 120, "the dump")
        _catch_up(pipeline, kit)
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
    assert replayed(events) == kit.source_rows([kit.table("t_int")])
