"""Unit tests of :class:`dblog.replica.CommitBuffer`: the events a replica output holds until
its commit, the retried-batch rule and the ``commit_every`` / ``commit_interval_s`` /
``commit_idle_s`` due rule on an injected clock."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dblog.core.model import ChangeEvent, Op, TableId
from dblog.replica import CommitBuffer

T = TableId("s", "t")


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def batch(first: int, count: int) -> list[ChangeEvent]:
    return [ChangeEvent(Op.INSERT, T, (i,), after={"id": i}, seq=i)
            for i in range(first, first + count)]


def seqs(buffer: CommitBuffer) -> list[int]:
    return [e.seq for e in buffer.events]


def fail() -> None:
    """A commit that fails (the target went away)."""
    raise RuntimeError("the target went away")


def test_write_buffers_each_batch_in_order_without_committing_below_commit_every() -> None:
    buffer = CommitBuffer(commit_every=10)
    commits: list[int] = []
    buffer.write(batch(1, 3), lambda: commits.append(len(buffer)))
    buffer.write(batch(4, 2), lambda: commits.append(len(buffer)))
    assert seqs(buffer) == [1, 2, 3, 4, 5] and len(buffer) == 5
    assert commits == []


def test_write_commits_as_soon_as_commit_every_events_wait() -> None:
    buffer = CommitBuffer(commit_every=4)
    commits: list[list[int]] = []

    def commit() -> None:
        commits.append(seqs(buffer))
        buffer.committed()

    buffer.write(batch(1, 3), commit)
    assert commits == []
    buffer.write(batch(4, 1), commit)
    assert commits == [[1, 2, 3, 4]] and len(buffer) == 0
    buffer.write(batch(5, 6), commit)  # one batch past commit_every: one commit
    assert commits == [[1, 2, 3, 4], [5, 6, 7, 8, 9, 10]]


def test_a_batch_retried_after_its_commit_failed_is_buffered_once() -> None:
    """The engine retries the very batch object whose commit raised."""
    buffer = CommitBuffer(commit_every=2)
    failing = batch(1, 3)

    with pytest.raises(RuntimeError):
        buffer.write(failing, fail)
    assert seqs(buffer) == [1, 2, 3]
    done: list[list[int]] = []
    buffer.write(failing, lambda: done.append(seqs(buffer)))  # the retry
    assert done == [[1, 2, 3]]


def test_only_the_failed_batch_object_is_skipped() -> None:
    """An equal batch that is a new object, or any batch after a successful write, is new."""
    buffer = CommitBuffer(commit_every=100)
    first = batch(1, 2)
    buffer.write(first, lambda: None)
    buffer.write(first, lambda: None)  # its write succeeded: handing it again is new data
    buffer.write(batch(1, 2), lambda: None)
    assert seqs(buffer) == [1, 2, 1, 2, 1, 2]


def test_on_new_is_told_of_new_batches_only() -> None:
    buffer = CommitBuffer(commit_every=2)
    told: list[Sequence[ChangeEvent]] = []
    failing = batch(1, 2)

    with pytest.raises(RuntimeError):
        buffer.write(failing, fail, told.append)
    buffer.write(failing, buffer.committed, told.append)
    assert told == [failing]


def test_a_flush_is_due_once_the_interval_passed_on_the_clock() -> None:
    clock = FakeClock()
    buffer = CommitBuffer(commit_every=100, commit_interval_s=10.0, clock=clock)
    buffer.write(batch(1, 1), lambda: None)
    clock.now += 9.9
    assert not buffer.due()
    clock.now += 0.1
    assert buffer.due()


def test_a_pause_of_commit_idle_s_after_the_last_write_makes_a_flush_due() -> None:
    """The end of a burst waits commit_idle_s, not the rest of commit_interval_s; writes
    that keep coming do not make it due, and nothing waiting is never due by the pause."""
    clock = FakeClock()
    buffer = CommitBuffer(commit_every=100, commit_interval_s=10.0, clock=clock,
                          commit_idle_s=1.0)
    clock.now += 5
    assert not buffer.due()  # idle, but nothing waits
    for _ in range(4):
        buffer.write(batch(1, 1), lambda: None)
        clock.now += 0.9
        assert not buffer.due()
    buffer.write([], lambda: None)  # an empty batch is no new event
    clock.now += 0.1
    assert buffer.due()
    buffer.committed()
    buffer.write(batch(2, 1), lambda: None)
    clock.now += 0.5
    assert not buffer.due()
    clock.now += 0.5
    assert buffer.due()
    without = CommitBuffer(commit_every=100, commit_interval_s=10.0, clock=clock)
    without.write(batch(3, 1), lambda: None)
    clock.now += 9.9
    assert not without.due()


def test_commit_every_waiting_events_make_a_flush_due_before_the_interval() -> None:
    buffer = CommitBuffer(commit_every=3, commit_interval_s=3600.0, clock=FakeClock())
    buffer.write(batch(1, 2), lambda: None)
    assert not buffer.due() and not buffer.full()
    buffer.write(batch(3, 1), lambda: None)  # commit does nothing here: the events stay
    assert buffer.full() and buffer.due()


def test_an_interval_of_zero_is_always_due() -> None:
    clock = FakeClock()
    buffer = CommitBuffer(commit_every=100, commit_interval_s=0.0, clock=clock)
    assert buffer.due()
    clock.now -= 5  # even on a clock that does not move forward
    assert buffer.due()


def test_committed_drops_the_events_and_restarts_the_interval() -> None:
    clock = FakeClock()
    buffer = CommitBuffer(commit_every=100, commit_interval_s=10.0, clock=clock)
    buffer.write(batch(1, 2), lambda: None)
    clock.now += 10
    assert buffer.due()
    assert buffer.committed() == clock.now
    assert len(buffer) == 0 and not buffer.due()
    clock.now += 10
    assert buffer.due()


def test_clear_drops_the_events_and_forgets_the_failed_batch() -> None:
    buffer = CommitBuffer(commit_every=1)
    failing = batch(1, 2)

    with pytest.raises(RuntimeError):
        buffer.write(failing, fail)
    buffer.clear()
    assert len(buffer) == 0
    buffer.write(failing, lambda: None)  # after a reopen the same batch is new again
    assert seqs(buffer) == [1, 2]
