"""Key-range dumps (a table's keys from one key to another, both included): planning in the
core, the engine over the in-memory source against a reference, restarts, request checks."""

from __future__ import annotations

import random
import re
import time
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dblog.api.service import KeyRangeControl
from dblog.app.pipeline import Pipeline
from dblog.core.dumprequests import range_dump
from dblog.core.dumps import (
    ChunkPlan,
    Dump,
    DumpState,
    KeyRange,
    complete_chunk,
    dump_from_json,
    dump_to_json,
    following_chunk,
    next_chunk,
    start_table,
)
from dblog.core.model import Key, Op, TableId
from dblog.errors import DumpRequestError
from dblog.ha.requests import checked
from dblog.testing import ListOutput, MemoryConnector, MemoryDatabase, MemoryStateStore
from tests.unit.engine_script import (
    Run,
    VersionBook,
    assert_no_time_travel,
    assert_seq_contiguous,
    fast_settings,
)
from tests.unit.test_engine_memory import committed, dump_progress, make_db, reads

A = TableId("public", "a")
BOUND = st.none() | st.integers(-5, 60).map(lambda i: (i,))


def in_range(keys: list[Key], low: Key | None, high: Key | None) -> list[Key]:
    """The reference: the keys with low <= key <= high, in key order."""
    return sorted(k for k in keys if (low is None or low <= k) and (high is None or k <= high))


def planned(keys: list[Key], key_range: KeyRange, chunk_size: int) -> tuple[Dump, list[Key]]:
    """Plan and complete a range dump's chunks over ``keys`` the way the engine does, the
    key list standing for the database (its order is the database's)."""
    ordered = sorted(keys)
    dump, emitted = range_dump(A, key_range, "r1"), list[Key]()
    for _ in range(10_000):
        plan = next_chunk(dump, chunk_size)
        if plan is None:
            return dump, emitted
        if plan.needs_start:
            dump = start_table(dump, A, ordered[-1] if ordered else None, len(ordered))
            continue
        rows = [k for k in ordered if (plan.after is None or k > plan.after
                                       or (plan.inclusive and k == plan.after))
                and (plan.upper is None or k <= plan.upper)][:chunk_size]
        emitted += rows
        dump = complete_chunk(dump, plan, rows[-1] if rows else None, len(rows), len(rows),
                              chunk_size)
    raise AssertionError("the dump never ended")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 50), unique=True).map(lambda ks: [(k,) for k in ks]),
       BOUND, BOUND, st.integers(1, 7))
def test_planned_chunks_cover_exactly_the_range(keys: list[Key], low: Key | None,
                                                high: Key | None, chunk_size: int) -> None:
    dump, emitted = planned(keys, KeyRange(low, high), chunk_size)
    assert emitted == in_range(keys, low, high)
    assert dump.state is DumpState.DONE


PAIR = st.tuples(st.integers(0, 4), st.sampled_from("abcde"))


@settings(max_examples=200, deadline=None)
@given(st.lists(PAIR, unique=True), st.none() | PAIR, st.none() | PAIR, st.integers(1, 5))
def test_planned_chunks_cover_exactly_a_composite_range(
        keys: list[Key], low: Key | None, high: Key | None, chunk_size: int) -> None:
    dump, emitted = planned(keys, KeyRange(low, high), chunk_size)
    assert emitted == in_range(keys, low, high)
    assert dump.state is DumpState.DONE


def test_the_first_chunk_includes_the_low_key_and_the_next_ones_follow_the_last_key() -> None:
    dump = start_table(range_dump(A, KeyRange((10,), (20,)), "r1"), A, (99,), 1000)
    assert dump.tables[0].upper_key == (20,), "the range's last key is the end, not the max"
    assert dump.tables[0].estimated_rows == 0  # the table's count says nothing of the range
    plan = next_chunk(dump, 3)
    assert plan == ChunkPlan("r1", A, after=(10,), upper=(20,), inclusive=True)
    assert following_chunk(plan, (12,), 3, 3) == ChunkPlan("r1", A, after=(12,), upper=(20,))
    dump = complete_chunk(dump, plan, (12,), 3, 3, 3)
    assert next_chunk(dump, 3) == ChunkPlan("r1", A, after=(12,), upper=(20,))


def test_an_open_range_ends_at_the_maximum_key_and_an_empty_table_at_once() -> None:
    dump = start_table(range_dump(A, KeyRange((10,), None), "r1"), A, (99,), 10)
    assert dump.tables[0].upper_key == (99,)
    empty = start_table(range_dump(A, KeyRange((10,), (20,)), "r2"), A, None, 0)
    assert empty.state is DumpState.DONE and empty.tables[0].upper_key is None


def test_a_range_dump_survives_the_state_codec_and_old_states_still_load() -> None:
    dump = complete_chunk(start_table(range_dump(A, KeyRange((1, "a"), None), "r1"), A,
                                      (9, "z"), 0),
                          ChunkPlan("r1", A, after=(1, "a"), upper=(9, "z"), inclusive=True),
                          (2, "b"), 5, 5, 5)
    again = dump_from_json(dump_to_json(dump))
    assert again == dump and again.key_range == KeyRange((1, "a"), None)
    assert next_chunk(again, 5) == ChunkPlan("r1", A, after=(2, "b"), upper=(9, "z"))
    old = dump_to_json(dump)
    del old["range"]  # a state written before range dumps
    assert dump_from_json(old).key_range is None


# -- the engine over the in-memory source ------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 50), unique=True), BOUND, BOUND, st.integers(1, 6),
       st.sampled_from(["inline", "worker", "windows"]))
def test_the_rows_of_a_range_dump_are_the_reference_rows(
        ids: list[int], low: Key | None, high: Key | None, chunk_size: int, mode: str) -> None:
    db = MemoryDatabase()
    t = db.create_table("public.t", ["id", "v"], ["id"])
    for k in ids:
        db.tables[t].rows[(k,)] = {"id": k, "v": f"v{k}"}
    out, store = ListOutput(), MemoryStateStore()
    run = Run(db, [out], store, windows=mode == "windows",
              settings=fast_settings(chunk_size, chunk_worker=mode != "inline"))
    future = run.engine.request_range_dump(
        "public.t", None if low is None else list(low), None if high is None else list(high))
    run.go()
    dump_id = future.result(0)
    events = [e for e in out.events if e.op is Op.READ]
    want = in_range([(k,) for k in ids], low, high)
    assert [e.key for e in events] == want
    assert all(e.after == {"id": e.key[0], "v": f"v{e.key[0]}"}  # type: ignore[index]
               for e in events)
    assert all(e.dump_id == dump_id for e in events)
    final = committed(store).dumps.get(dump_id)
    assert final.state is DumpState.DONE and final.rows == len(want)
    assert run.engine.status()["dumps"][0]["range"] == {
        "from": None if low is None else list(low), "to": None if high is None else list(high)}


def test_composite_key_ranges_compare_whole_keys() -> None:
    db = MemoryDatabase()
    t = db.create_table("public.pair", ["a", "b", "v"], ["a", "b"])
    for a in range(4):
        for b in ("x", "y", "z"):
            db.tables[t].rows[(a, b)] = {"a": a, "b": b, "v": 0}
    out = ListOutput()
    run = Run(db, [out], MemoryStateStore(), settings=fast_settings(2))
    run.engine.request_range_dump(t, [1, "y"], [3, "x"])
    run.go()
    assert [e.key for e in out.events if e.op is Op.READ] == [
        (1, "y"), (1, "z"), (2, "x"), (2, "y"), (2, "z"), (3, "x")]


def test_a_range_dump_under_writes_keeps_the_range_equal_to_the_source() -> None:
    db, t = make_db(80)
    rng = random.Random(3)
    book = VersionBook()
    out, store = ListOutput(), MemoryStateStore()

    def on_poll(run: Run) -> None:
        if run.polls < 150:
            n = book.next()
            op = rng.choice(["upsert", "update", "delete"])
            book.transaction(db, [(op, t, {"id": rng.randrange(90), "v": n})], n)

    run = Run(db, [out], store, settings=fast_settings(4), on_poll=on_poll)
    run.engine.request_range_dump(t, [20], [60])
    run.go()
    replayed: dict[Key, Any] = {}
    for event in out.events:  # the rows of keys 20..60 (the others were never dumped)
        if event.key is not None and 20 <= event.key[0] <= 60:
            if event.op is Op.DELETE:
                replayed.pop(event.key, None)
            else:
                replayed[event.key] = event.after
    source = {k: r for k, r in db.tables[t].rows.items() if 20 <= k[0] <= 60}
    assert replayed == source
    assert all(20 <= e.key[0] <= 60 for e in out.events if e.op is Op.READ)  # type: ignore[index]
    assert_no_time_travel(out.events, book)
    assert_seq_contiguous(out.events)


def test_a_range_dump_resumes_after_a_restart() -> None:
    db, t = make_db(100)
    out, store = ListOutput(), MemoryStateStore()
    first = Run(db, [out], store, settings=fast_settings(10), stop_when_idle=False)
    future = first.engine.request_range_dump(t, [15], [84])
    first.on_poll = lambda run: future.done() and dump_progress(run, future.result()).chunks >= 3
    first.go()
    dump_id = future.result(0)
    stored = committed(store).dumps.get(dump_id)
    assert stored.state is DumpState.RUNNING and stored.key_range == KeyRange((15,), (84,))
    assert stored.tables[0].last_key == (15 + 10 * stored.tables[0].chunks - 1,)
    Run(db, [out], store, settings=fast_settings(10)).go()
    assert Counter(reads(out.events)) == Counter(range(15, 85))  # every key once, none else
    assert committed(store).dumps.get(dump_id).state is DumpState.DONE


@pytest.mark.parametrize(("key_from", "key_to", "names"), [
    ([1, 2], None, "a key of public.t has 1 value(s) (id), got [1, 2]"),
    (None, ["a", "b"], "a key of public.t has 1 value(s) (id), got ['a', 'b']"),
    ([1], [5, 6], "ends have 1 and 2 value(s)"),
    ("1", None, "a list of values"),
    ([None], None, "null"),
    ([{"x": 1}], None, "string, number or boolean"),
])
def test_malformed_ranges_are_refused_naming_the_problem(key_from: Any, key_to: Any,
                                                         names: str) -> None:
    db, _ = make_db(5)
    run = Run(db, [ListOutput()], MemoryStateStore())
    future = run.engine.request_range_dump("public.t", key_from, key_to)
    run.go()
    with pytest.raises(DumpRequestError, match=re.escape(names)):
        future.result(0)
    assert run.engine.status()["dumps"] == []


def test_a_range_of_an_unknown_table_is_refused() -> None:
    db, _ = make_db(5)
    run = Run(db, [ListOutput()], MemoryStateStore())
    future = run.engine.request_range_dump("public.nope", [1], [2])
    missing = run.engine.request_range_dump(None, [1], [2])
    run.go()
    with pytest.raises(DumpRequestError, match=r"public\.nope"):
        future.result(0)
    with pytest.raises(DumpRequestError, match="needs the table"):
        missing.result(0)


def test_the_pipeline_is_a_key_range_control() -> None:
    db, _ = make_db(30)
    out = ListOutput()
    pipeline = Pipeline(MemoryConnector(db), [out], state=MemoryStateStore(),
                        settings=fast_settings(4, poll_timeout_s=0.01))
    assert isinstance(pipeline, KeyRangeControl)
    pipeline.start()
    try:
        dump_id = pipeline.request_range_dump("public.t", [3], [11], "range-1", timeout=10)
        assert dump_id == "range-1"
        for _ in range(500):
            status = pipeline.dump_status(dump_id)
            if status is not None and status["state"] == "done":
                break
            time.sleep(0.01)
        assert status is not None and status["state"] == "done"
        assert status["tables"][0]["rows"] == 9
    finally:
        pipeline.stop()
    assert sorted(reads(out.events)) == list(range(3, 12))


@pytest.mark.parametrize(("request_", "ok"), [
    ({"id": "a", "table": "public.t", "range": {"from": [1], "to": [2]}}, True),
    ({"id": "a", "table": "public.t", "range": {"from": None, "to": [2]}}, True),
    ({"id": "a", "table": "public.t", "range": {"from": [1], "to": [2, 3]}}, False),
    ({"id": "a", "table": "public.t", "keys": [[1]], "range": {"from": [1]}}, False),
    ({"id": "a", "table": "public.t", "range": [1, 2]}, False),
    ({"id": "a", "range": {"from": [1]}}, False),
])
def test_queued_range_requests_are_checked(request_: dict[str, Any], ok: bool) -> None:
    if ok:
        assert checked(request_) is request_
    else:
        with pytest.raises(DumpRequestError):
            checked(request_)
