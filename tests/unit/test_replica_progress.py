"""Unit tests of :class:`dblog.replica.ReplicaProgress`: what a replica output's commit skips,
refuses, plans and acknowledges, and that only a finished commit changes its progress."""

from __future__ import annotations

import pytest

from dblog.core.model import ChangeEvent, TableId
from dblog.errors import FatalOutputError, LeadershipLost
from dblog.replica import ApplyState, Guard, ReplicaProgress
from dblog.spi import Checkpoint
from tests.unit.test_replica_apply import ins, tx
from tests.unit.test_replica_sim import Pos, lsn

FIX = "rebuild the replica"
T = TableId("s", "t")


def checkpoint(seq: int) -> Checkpoint:
    return Checkpoint("p", 1, {"seq": seq, "position": None})


def binlog_tx(offset: int, key: int, seq: int) -> list[ChangeEvent]:
    """A binlog transaction (guards known per event: nothing is held)."""
    at = Pos(f"binlog:mysql-bin.000001:{offset}")
    return tx(None, ins(key, key, at), commit=at, seq=seq)


def refuse() -> bool:
    raise AssertionError("the fence is not asked when there is nothing to commit")


def test_nothing_to_commit_without_events_and_with_no_new_checkpoint() -> None:
    progress = ReplicaProgress("out", FIX)
    progress.restore(None, {}, checkpoint(5), 5)
    assert progress.begin([], None, refuse) is None
    assert progress.begin([], checkpoint(5), refuse) is None
    commit = progress.begin([], checkpoint(4), lambda: True)  # a new checkpoint alone commits
    assert commit is not None and commit.plan.tables == () and commit.through == 5


def test_a_deposed_leader_is_refused_before_planning() -> None:
    progress = ReplicaProgress("out", FIX)
    with pytest.raises(LeadershipLost, match="3 event\\(s\\) not written to out"):
        progress.begin(binlog_tx(100, 1, 1), None, lambda: False)
    assert progress.durable == 0 and progress.state == ApplyState()


def test_the_plan_covers_the_events_and_the_checkpoint_only_when_acknowledged() -> None:
    progress = ReplicaProgress("out", FIX)
    events = binlog_tx(100, 1, 1)
    commit = progress.begin(events, checkpoint(3), None)
    assert commit is not None
    assert commit.through == 3 and [t.table for t in commit.plan.tables] == [T]
    assert commit.checkpoint == checkpoint(3) and commit.scheme == "binlog-offset"
    beyond = progress.begin(events, checkpoint(4), None)
    assert beyond is not None and beyond.checkpoint is None  # past what the commit holds


def test_an_open_postgres_transaction_is_acknowledged_up_to_its_last_row() -> None:
    """The BEGIN carries the commit end: the rows before the COMMIT are planned already."""
    progress = ReplicaProgress("out", FIX)
    progress.restore(None, {}, None, 7)
    events = tx(lsn(200), ins(1, 1, lsn(110)), commit=lsn(200), seq=8)
    commit = progress.begin(events[:2], None, None)  # BEGIN and the row: no COMMIT yet
    assert commit is not None and commit.through == 9
    assert [c.guard for c in commit.plan.tables[0].changes] == [Guard(200, 1)]


def test_only_finish_changes_the_progress() -> None:
    """A failed commit leaves the progress alone: the retry plans the same events again."""
    progress = ReplicaProgress("out", FIX)
    events = binlog_tx(100, 1, 1)
    first = progress.begin(events, checkpoint(3), None)
    assert first is not None
    assert (progress.durable, progress.scheme, progress.checkpoint) == (0, None, None)
    again = progress.begin(events, checkpoint(3), None)
    assert again == first
    assert progress.finish(again) == 3
    assert (progress.durable, progress.scheme, progress.checkpoint) == (
        3, "binlog-offset", checkpoint(3))
    assert progress.state == again.state
    assert progress.begin([], checkpoint(3), refuse) is None


def test_a_commit_without_a_covered_checkpoint_keeps_the_stored_one() -> None:
    progress = ReplicaProgress("out", FIX)
    progress.restore("binlog-offset", {}, checkpoint(2), 2)
    commit = progress.begin(binlog_tx(100, 1, 3), None, None)
    assert commit is not None
    progress.finish(commit)
    assert progress.checkpoint == checkpoint(2) and progress.durable == 5


def test_the_acknowledged_seq_never_goes_back() -> None:
    progress = ReplicaProgress("out", FIX)
    progress.restore(None, {}, None, 50)
    commit = progress.begin(binlog_tx(100, 1, 1), None, None)  # a replay of older events
    assert commit is not None and commit.through == 50


def test_another_guard_scheme_is_refused_with_the_fix() -> None:
    progress = ReplicaProgress("out", FIX)
    progress.restore("postgres-commit-lsn", {}, None, 0)
    with pytest.raises(FatalOutputError, match="out: the replica's guards are "
                                               "'postgres-commit-lsn', the stream's "
                                               "'binlog-offset'") as caught:
        progress.begin(binlog_tx(100, 1, 1), None, None)
    assert caught.value.fix == FIX


def test_restore_takes_the_stored_barriers_and_no_open_transaction() -> None:
    progress = ReplicaProgress("out", FIX)
    progress.restore("binlog-offset", {T: Guard(7, 1)}, None, 9)
    assert progress.state == ApplyState.restored(None, {T: Guard(7, 1)})
    assert (progress.scheme, progress.checkpoint, progress.durable) == ("binlog-offset",
                                                                        None, 9)


def test_unplanned_events_are_covered_up_to_the_last_and_the_state_stays() -> None:
    """An output without replica tables (the Spark output with Kafka sinks only)."""
    progress = ReplicaProgress("out", FIX)
    progress.restore("binlog-offset", {}, None, 0)
    events = tx(lsn(100), ins(1, 1, lsn(110)), commit=lsn(200), seq=1)[:2]
    commit = progress.begin(events, None, None, plan=False)
    assert commit is not None
    assert commit.through == 2 and commit.plan.tables == () and commit.state == progress.state
    assert commit.scheme == "binlog-offset"  # another scheme is not refused: nothing planned
