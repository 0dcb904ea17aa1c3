"""Unit tests of acknowledgement logic (dblog.core.acks) and the state document (dblog.state)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from dblog.connectors.postgres.positions import Lsn
from dblog.core.acks import (
    CommitPoint,
    PipelineState,
    apply_points,
    min_acknowledged,
    split_acknowledged,
)
from dblog.core.dumps import (
    DumpQueue,
    DumpState,
    complete_chunk,
    next_chunk,
    set_state,
    start_table,
)
from dblog.core.dumps import tables_dump as new_dump
from dblog.core.model import TableId
from dblog.state import state_from_json, state_to_json

T = TableId("public", "t")


def points(*seqs: int) -> list[CommitPoint]:
    return [CommitPoint(s, Lsn(s * 10)) for s in seqs]


def test_min_acknowledged() -> None:
    assert min_acknowledged({}) == -1
    assert min_acknowledged({"a": 7}) == 7
    assert min_acknowledged({"a": 7, "b": 3, "c": 9}) == 3
    assert min_acknowledged({"a": 0, "b": 3}) == 0


def test_split_acknowledged_at_boundaries() -> None:
    pending = points(2, 5, 9)
    assert split_acknowledged(pending, -1) == ([], pending)
    assert split_acknowledged(pending, 1) == ([], pending)
    assert split_acknowledged(pending, 2) == (pending[:1], pending[1:])
    assert split_acknowledged(pending, 8) == (pending[:2], pending[2:])
    assert split_acknowledged(pending, 9) == (pending, [])
    assert split_acknowledged(pending, 100) == (pending, [])
    assert split_acknowledged([], 100) == ([], [])


def test_split_acknowledged_never_skips_a_waiting_point() -> None:
    """Points are in stream order; once one waits, every later one waits too."""
    odd = [CommitPoint(5, Lsn(1)), CommitPoint(3, Lsn(2)), CommitPoint(4, Lsn(3))]
    done, waiting = split_acknowledged(odd, 4)
    assert done == []
    assert waiting == odd


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 50), max_size=10).map(sorted), st.integers(-1, 60))
def test_split_acknowledged_property(seqs: list[int], acked: int) -> None:
    pending = points(*seqs)
    done, waiting = split_acknowledged(pending, acked)
    assert done + waiting == pending
    assert all(p.seq <= acked for p in done)
    assert all(p.seq > acked for p in waiting)


def test_apply_points_advances_position_and_seq() -> None:
    state = apply_points(PipelineState(), points(3, 7))
    assert state.position == Lsn(70)
    assert state.seq == 7
    assert state.dumps == DumpQueue()


def test_apply_points_keeps_the_position_of_a_point_without_one() -> None:
    state = apply_points(PipelineState(Lsn(5), 2), [CommitPoint(4, None)])
    assert state.position == Lsn(5)
    assert state.seq == 4


def test_apply_points_never_moves_seq_back() -> None:
    state = apply_points(PipelineState(Lsn(5), 10), [CommitPoint(4, Lsn(6))])
    assert state.seq == 10
    assert state.position == Lsn(6)


def test_apply_points_with_nothing_is_identity() -> None:
    state = PipelineState(Lsn(5), 3)
    assert apply_points(state, []) == state


def test_apply_points_adds_and_updates_dump_progress() -> None:
    dump = start_table(new_dump([T], "d1"), T, (9,), 10)
    plan = next_chunk(dump, 5)
    assert plan is not None
    after_chunk = complete_chunk(dump, plan, (4,), 5, 5, 5)
    state = apply_points(PipelineState(), [CommitPoint(1, Lsn(1), dump)])
    assert state.dumps.get("d1") == dump
    state = apply_points(state, [CommitPoint(2, Lsn(2), after_chunk)])
    assert state.dumps.get("d1") == after_chunk
    assert len(state.dumps.dumps) == 1
    assert state.dumps.get("d1").tables[0].last_key == (4,)  # type: ignore[union-attr]


def running_with_progress() -> tuple:  # type: ignore[type-arg]
    dump = start_table(new_dump([T], "d1"), T, (9,), 10)
    plan = next_chunk(dump, 5)
    assert plan is not None
    return dump, complete_chunk(dump, plan, (4,), 5, 5, 5)


def test_operator_pause_is_not_overwritten_by_an_older_progress_snapshot() -> None:
    before, progressed = running_with_progress()
    assert progressed.state is DumpState.RUNNING
    committed = PipelineState(Lsn(1), 1, DumpQueue((set_state(before, DumpState.PAUSED),)))
    state = apply_points(committed, [CommitPoint(5, Lsn(2), progressed)])
    merged = state.dumps.get("d1")
    assert merged is not None
    assert merged.state is DumpState.PAUSED
    assert merged.tables == progressed.tables  # progress still moves
    assert state.seq == 5


def test_operator_cancel_is_not_overwritten_by_an_older_progress_snapshot() -> None:
    before, progressed = running_with_progress()
    cancelled = set_state(before, DumpState.CANCELLED)
    committed = PipelineState(Lsn(1), 1, DumpQueue((cancelled,)))
    state = apply_points(committed, [CommitPoint(5, Lsn(2), progressed),
                                     CommitPoint(6, Lsn(3), set_state(progressed,
                                                                     DumpState.QUEUED))])
    merged = state.dumps.get("d1")
    assert merged is not None and merged.state is DumpState.CANCELLED


def test_failure_set_by_the_engine_keeps_its_error() -> None:
    before, progressed = running_with_progress()
    committed = PipelineState(None, 0, DumpQueue((set_state(before, DumpState.FAILED, "gone"),)))
    merged = apply_points(committed, [CommitPoint(1, None, progressed)]).dumps.get("d1")
    assert merged is not None
    assert merged.state is DumpState.FAILED and merged.error == "gone"


def test_resumed_dump_takes_the_snapshot_state() -> None:
    before, progressed = running_with_progress()
    committed = PipelineState(None, 0, DumpQueue((set_state(before, DumpState.QUEUED),)))
    merged = apply_points(committed, [CommitPoint(1, None, progressed)]).dumps.get("d1")
    assert merged is not None and merged.state is DumpState.RUNNING


def test_apply_points_keeps_other_dumps() -> None:
    other = new_dump([T], "d2")
    _, progressed = running_with_progress()
    state = apply_points(PipelineState(dumps=DumpQueue((other,))), [CommitPoint(1, None,
                                                                                progressed)])
    assert [d.id for d in state.dumps.dumps] == ["d2", "d1"]
    assert state.dumps.get("d2") == other


def test_state_document_round_trips_through_json() -> None:
    _, progressed = running_with_progress()
    paused = set_state(new_dump([TableId("s", "x")], "d2"), DumpState.PAUSED)
    state = PipelineState(Lsn.parse("16/B374D848"), 42, DumpQueue((progressed, paused)))
    doc = json.loads(json.dumps(state_to_json(state)))
    assert doc["position"] == "lsn:16/B374D848"
    assert doc["seq"] == 42
    assert state_from_json(doc) == state
    assert state_from_json(state_to_json(PipelineState())) == PipelineState()
