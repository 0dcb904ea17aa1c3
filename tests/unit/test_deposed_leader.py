"""A deposed leader writes nothing more: it does not open (cut back) outputs, does not commit
what it wrote before it noticed, and a batch it encoded before it noticed never reaches the file
(the jsonl output checks leadership right before the write system call)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from dblog.core.acks import PipelineState
from dblog.core.model import ChangeEvent, Op, TableId
from dblog.engine.delivery import Delivery
from dblog.errors import LeadershipLost
from dblog.outputs.jsonl import JsonlOutput
from dblog.testing import FakeClock, ListOutput, MemoryStateStore
from dblog.testing.source import LogOffset

T = TableId("public", "t")


def event(i: int) -> ChangeEvent:
    return ChangeEvent(Op.INSERT, T, (i,), None, {"id": i}, None)


class Flag:
    def __init__(self) -> None:
        self.leader = True

    def __call__(self) -> bool:
        return self.leader


def delivery(out: JsonlOutput, flag: Flag) -> Delivery:
    d = Delivery([out], MemoryStateStore(), FakeClock(), epoch=1, batch_size=10)
    d.is_leader = flag
    return d


def lines(path: Path) -> int:
    return len(path.read_bytes().splitlines()) if path.exists() else 0


class LostAfter(Flag):
    """Leader for the first ``calls`` checks, deposed after: a leader frozen (SIGSTOP) after
    the delivery checked leadership and resumed after its successor took over."""

    def __init__(self, calls: int) -> None:
        super().__init__()
        self.calls = calls

    def __call__(self) -> bool:
        self.calls -= 1
        return self.calls >= 0


def test_a_batch_checked_before_leadership_was_lost_is_not_written(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    d = delivery(JsonlOutput({"path": str(path)}), Flag())
    d.resume(PipelineState(), None)
    d.emit_all([event(i) for i in range(10)])
    assert lines(path) == 10
    d.is_leader = LostAfter(1)  # the delivery's check passes; the output's fence does not
    with pytest.raises(LeadershipLost):
        d.emit_all([event(i) for i in range(10, 20)])
    d.close()
    assert lines(path) == 10, "a batch reached the file after leadership was lost"


def test_a_leaders_batches_reach_the_file_at_once(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    d = delivery(JsonlOutput({"path": str(path)}), Flag())
    d.resume(PipelineState(), None)
    d.emit_all([event(i) for i in range(20)])  # two batches of 10: unbuffered writes
    assert lines(path) == 20
    d.close()
    assert lines(path) == 20


def test_a_deposed_leader_does_not_flush_or_commit(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    flag = Flag()
    d = delivery(JsonlOutput({"path": str(path)}), flag)
    d.resume(PipelineState(), None)
    d.emit_all([event(i) for i in range(20)])
    d.mark(None)
    flag.leader = False
    with pytest.raises(LeadershipLost):
        d.commit()
    d.close()
    # written while it led, never committed: the successor's open cuts them back
    assert lines(path) == 20
    assert d.state.seq == 0
    successor = JsonlOutput({"path": str(path)})
    successor.open(d.state.seq)
    successor.close()
    assert lines(path) == 0


def test_a_deposed_leader_does_not_open_and_cut_back_outputs(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(b'{"seq":1}\n{"seq":2}\n')  # a successor wrote seq 2, not yet committed
    flag = Flag()
    flag.leader = False
    d = delivery(JsonlOutput({"path": str(path)}), flag)
    with pytest.raises(LeadershipLost):
        d.resume(PipelineState(seq=1), 0)
    assert lines(path) == 2


class SlowOutput(ListOutput):
    """An output that is not a FencedOutput (a plug-in), slow until its gate opens."""

    def __init__(self) -> None:
        super().__init__("slow")
        self.gate = threading.Event()
        self.deposed = False
        self.written_after_deposal = 0

    def write(self, events: Sequence[ChangeEvent]) -> None:
        self.gate.wait(5)
        if self.deposed:
            self.written_after_deposal += len(events)
        super().write(events)


def test_a_deposed_leaders_queued_batches_never_reach_an_unfenced_output() -> None:
    out = SlowOutput()
    d = Delivery([out], MemoryStateStore(), FakeClock(), epoch=1, batch_size=10, threaded=True,
                 max_batches=4)
    flag = Flag()
    d.is_leader = flag
    d.resume(PipelineState(), None)
    for i in range(40):  # four batches: one in the worker, three queued
        d.emit(ChangeEvent(Op.INSERT, T, (i,), None, {"id": i}, LogOffset(i)))
    flag.leader, out.deposed = False, True
    out.gate.set()  # the output recovers; the worker meets the rest of the queue
    with pytest.raises(LeadershipLost):
        for i in range(40, 80):  # the engine, not yet aware, hands over more
            d.emit(ChangeEvent(Op.INSERT, T, (i,), None, {"id": i}, LogOffset(i)))
    time.sleep(0.3)  # the worker meets the queued batches before the engine closes
    d.close()
    assert out.written_after_deposal <= 10  # at most the batch the worker had taken
