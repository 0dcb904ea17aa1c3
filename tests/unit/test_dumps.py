"""Unit tests of dump planning and progress (dblog.core.dumps)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dblog.core.dumps import (
    ChunkPlan,
    Dump,
    DumpQueue,
    DumpState,
    KeyRange,
    TableProgress,
    complete_chunk,
    dump_from_json,
    dump_to_json,
    following_chunk,
    keys_dump,
    next_chunk,
    set_state,
    start_table,
    tables_dump,
)
from dblog.core.model import TableId

A = TableId("public", "a")
B = TableId("shop", "b")


def run_range_dump(rows: list[int], chunk_size: int, table: TableId = A) -> tuple[Dump, list[
        list[int]]]:
    """Plan and complete chunks against a sorted key list the way the engine does."""
    dump = tables_dump([table], "d1")
    plan = next_chunk(dump, chunk_size)
    assert plan == ChunkPlan("d1", table, needs_start=True)
    upper = (max(rows),) if rows else None
    dump = start_table(dump, table, upper, len(rows))
    chunks: list[list[int]] = []
    while (plan := next_chunk(dump, chunk_size)) is not None:
        assert plan.table == table and plan.keys is None and not plan.needs_start
        assert plan.upper == upper
        picked = _pick(rows, plan, chunk_size)
        chunks.append(picked)
        last = (picked[-1],) if picked else None
        dump = complete_chunk(dump, plan, last, len(picked), len(picked), chunk_size)
        assert len(chunks) <= len(rows) + 1, "the dump does not terminate"
    return dump, chunks


def test_new_tables_dump_is_queued_and_needs_a_start() -> None:
    dump = tables_dump([A, B], "d1")
    assert dump.state is DumpState.QUEUED
    assert [t.table for t in dump.tables] == [A, B]
    assert next_chunk(dump, 10) == ChunkPlan("d1", A, needs_start=True)
    assert dump.chunks == 0 and dump.rows == 0


def test_dump_ids_are_unique_by_default() -> None:
    assert tables_dump([A]).id != tables_dump([A]).id


def test_start_table_records_upper_bound_and_estimate() -> None:
    dump = start_table(tables_dump([A, B], "d1"), A, (99,), 1234)
    progress = dump.tables[0]
    assert progress.started and not progress.done
    assert progress.upper_key == (99,)
    assert progress.estimated_rows == 1234
    assert dump.state is DumpState.RUNNING
    assert next_chunk(dump, 10) == ChunkPlan("d1", A, after=None, upper=(99,))
    assert dump.tables[1] == TableProgress(B)


def test_empty_table_is_done_at_start_and_the_dump_moves_on() -> None:
    dump = start_table(tables_dump([A, B], "d1"), A, None, 0)
    assert dump.tables[0].done
    assert dump.state is DumpState.RUNNING
    assert next_chunk(dump, 10) == ChunkPlan("d1", B, needs_start=True)
    dump = start_table(dump, B, None, 0)
    assert dump.state is DumpState.DONE
    assert next_chunk(dump, 10) is None


def test_empty_single_table_dump_reads_no_chunk() -> None:
    dump, chunks = run_range_dump([], 5)
    assert chunks == []
    assert dump.state is DumpState.DONE
    assert dump.chunks == 0


def test_exact_multiple_of_chunk_size_needs_no_empty_extra_chunk() -> None:
    dump, chunks = run_range_dump(list(range(10)), 5)
    assert chunks == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert dump.state is DumpState.DONE
    assert dump.tables[0].chunks == 2
    assert dump.tables[0].rows == 10
    assert dump.tables[0].last_key == (9,)


def test_partial_last_chunk() -> None:
    dump, chunks = run_range_dump(list(range(0, 23, 2)), 5)
    assert chunks == [[0, 2, 4, 6, 8], [10, 12, 14, 16, 18], [20, 22]]
    assert dump.state is DumpState.DONE
    assert dump.rows == 12


def test_chunk_size_one() -> None:
    dump, chunks = run_range_dump([3, 7, 11], 1)
    assert chunks == [[3], [7], [11]]
    assert dump.chunks == 3


def test_next_chunk_starts_after_the_last_selected_key_even_if_dropped() -> None:
    dump = start_table(tables_dump([A], "d1"), A, (100,), 0)
    plan = next_chunk(dump, 3)
    assert plan is not None
    # three rows selected, one dropped by the window: progress counts emitted rows but the
    # next chunk still starts after the last selected key
    dump = complete_chunk(dump, plan, (30,), selected=3, emitted=2, limit=3)
    assert dump.tables[0].rows == 2
    assert next_chunk(dump, 3) == ChunkPlan("d1", A, after=(30,), upper=(100,))


def test_upper_bound_stops_the_dump() -> None:
    """Rows inserted above the upper bound after the dump started come through the log."""
    dump = start_table(tables_dump([A], "d1"), A, (5,), 0)
    plan = next_chunk(dump, 5)
    assert plan is not None
    # the SELECT is bounded by upper, returns 5 rows ending exactly at the upper key
    dump = complete_chunk(dump, plan, (5,), selected=5, emitted=5, limit=5)
    assert dump.state is DumpState.DONE
    assert dump.tables[0].done
    rows_then_more = [1, 2, 3, 4, 5, 6, 7, 8]
    dump, chunks = run_range_dump(rows_then_more, 3)
    assert chunks == [[1, 2, 3], [4, 5, 6], [7, 8]]
    # with the bound captured before 6..8 existed only 1..5 are read
    bounded = start_table(tables_dump([A], "d2"), A, (5,), 0)
    reads: list[list[int]] = []
    while (plan := next_chunk(bounded, 3)) is not None:
        picked = _pick(rows_then_more, plan, 3)
        reads.append(picked)
        bounded = complete_chunk(bounded, plan, (picked[-1],) if picked else None, len(picked),
                                 len(picked), 3)
    assert reads == [[1, 2, 3], [4, 5]]


def test_empty_chunk_finishes_the_table_and_keeps_last_key() -> None:
    dump = start_table(tables_dump([A], "d1"), A, (9,), 0)
    plan = next_chunk(dump, 5)
    assert plan is not None
    dump = complete_chunk(dump, plan, (4,), 5, 5, 5)
    plan = next_chunk(dump, 5)
    assert plan is not None and plan.after == (4,)
    dump = complete_chunk(dump, plan, None, 0, 0, 5)  # rows 5..9 were deleted meanwhile
    assert dump.state is DumpState.DONE
    assert dump.tables[0].last_key == (4,)
    assert dump.tables[0].chunks == 2


def test_a_short_chunk_ends_the_table_below_the_upper_bound() -> None:
    """Rows at the top of the range were deleted: a chunk with fewer rows than the limit is
    the last one, there is no extra empty chunk."""
    for selected in (1, 3, 4):
        dump = start_table(tables_dump([A], "d1"), A, (99,), 0)
        plan = next_chunk(dump, 5)
        assert plan is not None
        dump = complete_chunk(dump, plan, (selected * 10,), selected, selected, 5)
        assert dump.state is DumpState.DONE, selected
        assert next_chunk(dump, 5) is None
    dump = start_table(tables_dump([A], "d1"), A, (99,), 0)
    plan = next_chunk(dump, 5)
    assert plan is not None
    dump = complete_chunk(dump, plan, (50,), 5, 4, 5)  # full chunk, one row dropped
    assert dump.state is DumpState.RUNNING


def test_multi_table_dump_goes_table_by_table() -> None:
    dump = tables_dump([A, B], "d1")
    dump = start_table(dump, A, (2,), 2)
    plan = next_chunk(dump, 10)
    assert plan is not None
    dump = complete_chunk(dump, plan, (2,), 2, 2, 10)
    assert dump.tables[0].done and dump.state is DumpState.RUNNING
    assert next_chunk(dump, 10) == ChunkPlan("d1", B, needs_start=True)
    dump = start_table(dump, B, (("x", 1),), 1)
    plan = next_chunk(dump, 10)
    assert plan == ChunkPlan("d1", B, after=None, upper=(("x", 1),))
    dump = complete_chunk(dump, plan, (("x", 1),), 1, 1, 10)
    assert dump.state is DumpState.DONE
    assert dump.rows == 3 and dump.chunks == 2


def test_key_list_dump_reads_keys_in_batches() -> None:
    keys = [(k,) for k in (5, 1, 9, 3, 7)]
    dump = keys_dump(A, keys, "k1")
    assert dump.tables[0].started
    plan = next_chunk(dump, 2)
    assert plan == ChunkPlan("k1", A, keys=((5,), (1,)))
    dump = complete_chunk(dump, plan, (1,), 2, 1, 2)  # one of the keys does not exist
    assert dump.key_index == 2 and dump.state is DumpState.RUNNING
    plan = next_chunk(dump, 2)
    assert plan is not None and plan.keys == ((9,), (3,))
    dump = complete_chunk(dump, plan, (3,), 2, 2, 2)
    plan = next_chunk(dump, 2)
    assert plan is not None and plan.keys == ((7,),)
    dump = complete_chunk(dump, plan, (7,), 1, 1, 2)
    assert dump.state is DumpState.DONE
    assert next_chunk(dump, 2) is None
    assert dump.rows == 4 and dump.chunks == 3


def test_empty_key_list_dump_has_no_chunk() -> None:
    assert next_chunk(keys_dump(A, [], "k0"), 5) is None


def test_inactive_dumps_plan_nothing() -> None:
    dump = start_table(tables_dump([A], "d1"), A, (9,), 0)
    for state in (DumpState.PAUSED, DumpState.CANCELLED, DumpState.FAILED, DumpState.DONE):
        assert next_chunk(set_state(dump, state), 5) is None, state
    assert next_chunk(set_state(dump, DumpState.QUEUED), 5) is not None


def test_set_state_keeps_progress_and_records_error() -> None:
    dump = start_table(tables_dump([A], "d1"), A, (9,), 0)
    failed = set_state(dump, DumpState.FAILED, "boom")
    assert failed.error == "boom" and failed.state is DumpState.FAILED
    assert failed.tables == dump.tables


def test_dump_queue_active_get_add_put() -> None:
    first = set_state(tables_dump([A], "d1"), DumpState.PAUSED)
    second = tables_dump([B], "d2")
    queue = DumpQueue().add(first).add(second)
    assert queue.active() == second
    assert queue.get("d1") == first and queue.get("nope") is None
    urgent = keys_dump(A, [(1,)], "k", internal=True)
    queue = queue.add(urgent, front=True)
    assert [d.id for d in queue.dumps] == ["k", "d1", "d2"]
    assert queue.active() == urgent
    queue = queue.put(set_state(urgent, DumpState.DONE)).put(set_state(first, DumpState.QUEUED))
    assert [d.id for d in queue.dumps] == ["k", "d1", "d2"]
    assert queue.active() is not None and queue.active().id == "d1"  # type: ignore[union-attr]


# -- serialisation -------------------------------------------------------------------------


def json_round_trip(dump: Dump) -> Dump:
    return dump_from_json(json.loads(json.dumps(dump_to_json(dump))))


def test_json_round_trip_of_a_running_range_dump() -> None:
    dump = start_table(tables_dump([A, B], "d1"), A, (10, "z"), 77)
    plan = next_chunk(dump, 3)
    assert plan is not None
    dump = complete_chunk(dump, plan, (3, "c"), 3, 2, 3)
    assert json_round_trip(dump) == dump


def test_json_round_trip_of_key_list_and_failed_dumps() -> None:
    dump = keys_dump(B, [(1, "a"), (2, "b")], "k1", internal=True)
    dump = complete_chunk(dump, ChunkPlan("k1", B, keys=((1, "a"),)), (1, "a"), 1, 1, 1)
    assert json_round_trip(dump) == dump
    failed = set_state(tables_dump([A], "f"), DumpState.FAILED, "unknown table")
    assert json_round_trip(failed) == failed
    assert dump_to_json(failed)["state"] == "failed"


def test_json_round_trip_of_a_schema_with_a_dot() -> None:
    """PostgreSQL allows dots in quoted identifiers ("my.schema"."t")."""
    dump = tables_dump([TableId("my.schema", "t")], "d")
    assert json_round_trip(dump).tables[0].table == TableId("my.schema", "t")


KEY_VALUE = st.one_of(st.integers(), st.text(max_size=5), st.booleans(), st.none())
KEY = st.lists(KEY_VALUE, min_size=1, max_size=3).map(tuple)
NAME = st.text(st.characters(codec="utf-8", exclude_characters="."), min_size=1, max_size=8)


@st.composite
def dumps(draw: st.DrawFn) -> Dump:
    tables = tuple(
        TableProgress(TableId(draw(NAME), draw(NAME)), draw(st.booleans()), draw(st.booleans()),
                      draw(st.none() | KEY), draw(st.none() | KEY), draw(st.integers(0, 10**6)),
                      draw(st.integers(0, 10**9)), draw(st.integers(0, 10**9)))
        for _ in range(draw(st.integers(1, 3)))
    )
    keys = draw(st.none() | st.lists(KEY, max_size=5).map(tuple))
    key_range = draw(st.none() | st.builds(KeyRange, st.none() | KEY, st.none() | KEY))
    return Dump(draw(st.text(min_size=1, max_size=12)), tables, keys, draw(st.integers(0, 5)),
                draw(st.sampled_from(DumpState)), draw(st.none() | st.text(max_size=10)),
                draw(st.booleans()), key_range)


@settings(max_examples=200, deadline=None)
@given(dumps())
def test_json_round_trip_property(dump: Dump) -> None:
    assert json_round_trip(dump) == dump


def test_dump_from_json_accepts_older_documents_without_optional_fields() -> None:
    raw = dump_to_json(start_table(tables_dump([A], "d1"), A, (9,), 5))
    for t in raw["tables"]:
        del t["estimated_rows"]
    del raw["error"], raw["internal"], raw["range"]
    dump = dump_from_json(raw)
    assert dump.tables[0].estimated_rows == 0
    assert dump.error is None and dump.internal is False and dump.key_range is None
    assert dump.tables[0].upper_key == (9,)


def test_dump_from_json_rejects_an_unknown_state() -> None:
    raw = dump_to_json(tables_dump([A], "d1"))
    raw["state"] = "sleeping"
    with pytest.raises(ValueError):
        dump_from_json(raw)


def test_finished_dumps_beyond_the_retention_are_forgotten() -> None:
    from dblog.core.dumps import KEEP_FINISHED, DumpQueue

    queue = DumpQueue()
    for i in range(KEEP_FINISHED + 5):
        queue = queue.add(set_state(tables_dump([A], f"d{i}"), DumpState.DONE))
    queue = queue.add(tables_dump([A], "live"))
    ids = [d.id for d in queue.dumps]
    assert len(ids) == KEEP_FINISHED + 1
    assert ids[0] == "d5" and ids[-1] == "live", "the oldest finished dumps go first"
    active = queue.active()
    assert active is not None and active.id == "live"


def _pick(rows: list[int], plan: ChunkPlan, chunk_size: int) -> list[int]:
    return [k for k in rows if (plan.after is None or (k,) > plan.after)
            and (plan.upper is None or (k,) <= plan.upper)][:chunk_size]


@given(st.lists(st.integers(0, 60), unique=True).map(sorted), st.integers(1, 8))
@settings(max_examples=300)
def test_following_chunk_plans_what_completing_the_chunk_would(rows: list[int],
                                                               chunk_size: int) -> None:
    """The plan a read-ahead job makes from the previous SELECT alone is the plan the engine
    makes after completing that chunk (complete_chunk, then next_chunk), up to the end."""
    dump = start_table(tables_dump([A], "d1"), A, (max(rows),) if rows else None, len(rows))
    plan = next_chunk(dump, chunk_size)
    while plan is not None:
        picked = _pick(rows, plan, chunk_size)
        last = (picked[-1],) if picked else None
        ahead = following_chunk(plan, last, len(picked), chunk_size)
        dump = complete_chunk(dump, plan, last, len(picked), len(picked), chunk_size)
        plan = next_chunk(dump, chunk_size)
        assert ahead == plan


def test_following_chunk_of_a_key_list_or_a_table_start_is_none() -> None:
    keys = ChunkPlan("d1", A, keys=((1,), (2,)))
    assert following_chunk(keys, (2,), 2, 2) is None
    assert following_chunk(ChunkPlan("d1", A, needs_start=True), None, 0, 5) is None
    full = ChunkPlan("d1", A, after=(3,), upper=(99,))
    assert following_chunk(full, (8,), 5, 5) == ChunkPlan("d1", A, after=(8,), upper=(99,))
    assert following_chunk(full, (8,), 4, 5) is None  # short: the table ends here
    assert following_chunk(full, (99,), 5, 5) is None  # reached the upper bound
