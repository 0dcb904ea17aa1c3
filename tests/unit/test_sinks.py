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
from dblog.errors import FatalOutputError, LeadershipLost
from dblog.spi import EncodedBatch, PreEncodingOutput
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


def test_a_batch_dropped_while_the_lease_was_invalid_stops_all_later_acknowledgements() -> None:
    """The lease may be valid again before the engine thread looks (a suspended connection
    whose session reconnected, a late renewal): a batch the worker dropped meanwhile must
    not let a later flush acknowledge past it."""
    out = GatedOutput()
    valid = [True]
    sink = ThreadedSink(out, FakeClock(), attempts=2, max_batches=4,
                        may_write=lambda: valid[0])
    sink.open(0)
    sink.write(batch(1))  # the worker takes it and blocks in write
    deadline = time.monotonic() + 5
    while out.started == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    sink.write(batch(2))  # queued behind it
    valid[0] = False
    out.gate.set()  # the worker finishes batch 1, then meets batch 2 while the lease is invalid
    while sink._queue.qsize() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    valid[0] = True  # valid again before the engine thread looked
    with pytest.raises(LeadershipLost):
        sink.write(batch(3))
        sink.sync()
    with pytest.raises(LeadershipLost):
        sink.acknowledged()
    assert [e.seq for e in out.events] == [1]


class ClosingNoted(ListOutput):
    def __init__(self) -> None:
        super().__init__("noted")
        self.closed = self.discarded = False

    def close(self) -> None:
        self.closed = True

    def discard(self) -> None:
        self.discarded = True


def test_a_sink_that_dropped_a_batch_discards_its_output_at_close() -> None:
    """After the sticky LeadershipLost the lease may be valid again, so the delivery closes
    rather than discards: the output must still be discarded (nothing it holds written)."""
    out = ClosingNoted()
    valid = [False]
    sink = ThreadedSink(out, FakeClock(), attempts=2, max_batches=4,
                        may_write=lambda: valid[0])
    sink.open(0)
    sink._queue.put(batch(1))  # the worker meets it while the lease is invalid
    deadline = time.monotonic() + 5
    while sink._error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    valid[0] = True
    with pytest.raises(LeadershipLost):
        sink.acknowledged()
    sink.close()
    assert out.discarded and not out.closed and out.events == []


class ThreadNoting:
    """A pre-encoding output (:class:`dblog.spi.PreEncodingOutput`) that notes which thread
    encoded and which wrote each batch."""

    def __init__(self) -> None:
        self.name = "noting"
        self.lines: list[bytes] = []
        self.encoded_on: list[str] = []
        self.written_on: list[str] = []
        self._written = 0

    def open(self, committed_seq: int) -> None:
        self._written = committed_seq

    def encode(self, events: Sequence[ChangeEvent]) -> EncodedBatch:
        self.encoded_on.append(threading.current_thread().name)
        data = b"".join(b"%d\n" % e.seq for e in events)
        return EncodedBatch(data, len(events), events[-1].seq if events else -1)

    def write_encoded(self, encoded: EncodedBatch) -> None:
        self.written_on.append(threading.current_thread().name)
        self.lines.extend(encoded.data.splitlines())
        self._written = encoded.last_seq

    def write(self, events: Sequence[ChangeEvent]) -> None:
        self.write_encoded(self.encode(events))

    def flush(self) -> int:
        return self._written

    def close(self) -> None:
        pass


def test_a_pre_encoding_output_encodes_on_the_callers_thread_and_writes_on_its_own() -> None:
    out = ThreadNoting()
    assert isinstance(out, PreEncodingOutput)
    sink = ThreadedSink(out, FakeClock(), attempts=2, max_batches=2)
    sink.open(0)
    sink.write(batch(1, 2))
    sink.write(batch(3))
    assert sink.sync() == 3
    sink.close()
    caller = threading.current_thread().name
    assert out.encoded_on == [caller, caller]
    assert out.written_on == ["dblog-output-noting"] * 2
    assert out.lines == [b"1", b"2", b"3"]
