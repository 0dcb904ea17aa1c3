"""Outputs driven from a bounded queue on their own thread: order, acknowledgements after
flushes, backpressure, failures surfacing on the engine thread, and a deposed leader's queue
dropped unwritten."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from dblog.core.model import ChangeEvent, Op, TableId
from dblog.engine.sinks import ThreadedSink
from dblog.errors import FatalOutputError
from dblog.testing import FakeClock, ListOutput

T = TableId("s", "t")


def batch(*seqs: int) -> list[ChangeEvent]:
    return [ChangeEvent(Op.INSERT, T, (s,), after={"id": s}, seq=s) for s in seqs]


class GatedOutput(ListOutput):
    """Blocks in write until the gate opens; counts the writes that began."""

    def __init__(self) -> None:
        super().__init__("gated")
        self.gate = threading.Event()
        self.started = 0

    def write(self, events: Sequence[ChangeEvent]) -> None:
        self.started += 1
        self.gate.wait(10)
        super().write(events)


def _sink(output: ListOutput, max_batches: int = 2) -> ThreadedSink:
    sink = ThreadedSink(output, FakeClock(), attempts=2, max_batches=max_batches)
    sink.open(0)
    return sink


def test_batches_are_written_in_order_and_acknowledged_after_a_flush() -> None:
    out = ListOutput()
    sink = _sink(out)
    sink.write(batch(1, 2))
    sink.write(batch(3))
    assert sink.acknowledged() == 0  # nothing flushed yet
    assert sink.sync() == 3
    assert [e.seq for e in out.events] == [1, 2, 3]
    sink.close()


def test_a_full_queue_blocks_the_engine_until_the_output_catches_up() -> None:
    out = GatedOutput()
    sink = _sink(out, max_batches=1)
    sink.write(batch(1))  # taken by the worker, which blocks in write
    deadline = time.monotonic() + 5
    while out.started == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    sink.write(batch(2))  # fills the queue
    blocked = threading.Thread(target=sink.write, args=(batch(3),))
    blocked.start()
    blocked.join(0.3)
    assert blocked.is_alive(), "a write into a full queue must wait"
    out.gate.set()
    blocked.join(5)
    assert not blocked.is_alive()
    assert sink.sync() == 3 and [e.seq for e in out.events] == [1, 2, 3]
    sink.close()


def test_a_failure_in_the_worker_surfaces_at_the_next_call_and_nothing_after_is_acked() -> None:
    out = ListOutput()
    sink = _sink(out)
    out.fail_next = FatalOutputError("disk gone")
    sink.write(batch(1))
    with pytest.raises(FatalOutputError, match="disk gone"):
        sink.sync()
    with pytest.raises(FatalOutputError):
        sink.write(batch(2))
    assert out.events == [] and sink._acked == 0


def test_discard_drops_what_is_queued() -> None:
    out = GatedOutput()
    sink = _sink(out, max_batches=4)
    sink.write(batch(1))
    deadline = time.monotonic() + 5
    while out.started == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    sink.write(batch(2))
    sink.write(batch(3))
    releaser = threading.Timer(0.2, out.gate.set)
    releaser.start()
    sink.discard()  # the batch in progress finishes; the queued ones are never written
    releaser.join()
    assert [e.seq for e in out.events] == [1]
