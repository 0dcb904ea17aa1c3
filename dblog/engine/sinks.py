"""How delivery drives an output: on the engine thread (:class:`InlineSink`) or from a bounded
queue on the output's own thread (:class:`ThreadedSink`), behind one interface.

Why a thread per output: an output's round trips (a write, an fsync, a broker's reply) must not
hold the log loop (SPEC section 6). The engine hands a batch over and moves on; the worker
writes batches in order and flushes when asked, and reports the highest sequence number the
output acknowledged. The queue holds at most ``max_batches`` batches: when the output is slow
the engine blocks on a full queue, so a slow output slows capture instead of growing memory.

Soundness of the acknowledgements: the worker processes the queue in order, so a flush that
returns ``n`` was asked after every batch up to ``n`` was handed over; delivery commits state
only up to the lowest acknowledgement of all sinks, exactly as with inline outputs, only later
(one flush request behind). A failure in the worker (after the retries) is kept and raised on
the engine thread at its next call; nothing written after it is acknowledged. A deposed
leader's queued batches are dropped, never written (:meth:`ThreadedSink.discard`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from dblog.core.model import ChangeEvent
from dblog.errors import LeadershipLost
from dblog.runtime.retry import retry
from dblog.spi import (
    Checkpoint,
    CheckpointingOutput,
    Clock,
    DiscardingOutput,
    EncodedBatch,
    Output,
    PreEncodingOutput,
)
from dblog.spi.metrics import Counters, MetricsSink

log = logging.getLogger("dblog.engine.sinks")
T = TypeVar("T")
_PUT_WAIT_S = 0.1


class Sink(Protocol):
    name: str

    def open(self, committed_seq: int) -> None: ...

    def write(self, batch: Sequence[ChangeEvent]) -> None:
        """Hand a batch over (may block while the output is behind)."""

    def request_flush(self, checkpoint: Checkpoint | None = None) -> None:
        """Ask for everything handed over to be made durable (without waiting), with
        ``checkpoint`` where the output commits one (:class:`CheckpointingOutput`)."""

    def acknowledged(self) -> int:
        """The highest sequence number the output reported durable so far."""
        ...

    def sync(self, checkpoint: Checkpoint | None = None) -> int:
        """Make everything handed over durable, wait for it, return the acknowledgement."""
        ...

    def close(self) -> None: ...

    def discard(self) -> None:
        """Stop without writing anything still held (a deposed leader)."""


class InlineSink:
    """Calls the output on the engine thread (deterministic tests, and the reference)."""

    def __init__(self, output: Output, clock: Clock, attempts: int,
                 metrics: MetricsSink | None = None) -> None:
        self.output, self.clock, self.attempts = output, clock, attempts
        self.metrics: MetricsSink = metrics or Counters()
        self.name = output.name
        self._acked = 0

    def _call(self, action: str, call: Callable[[], T]) -> T:
        """One output call, retried, each attempt timed and counted for the metrics."""
        def timed() -> T:
            started = time.monotonic()
            try:
                result = call()
            except BaseException:
                self.metrics.output_call(self.name, action, time.monotonic() - started, True)
                raise
            self.metrics.output_call(self.name, action, time.monotonic() - started, False)
            return result

        return retry(timed, f"{action} {self.name}", self.clock, attempts=self.attempts)

    def open(self, committed_seq: int) -> None:
        self._call("open", lambda: self.output.open(committed_seq))
        self._acked = committed_seq

    def write(self, batch: Sequence[ChangeEvent]) -> None:
        self._call("write", lambda: self.output.write(batch))

    def request_flush(self, checkpoint: Checkpoint | None = None) -> None:
        self._acked = self._flush(checkpoint)

    def _flush(self, checkpoint: Checkpoint | None) -> int:
        output = self.output
        if checkpoint is not None and isinstance(output, CheckpointingOutput):
            return self._call("flush", lambda: output.flush_checkpoint(checkpoint))
        return self._call("flush", output.flush)

    def acknowledged(self) -> int:
        return self._acked

    def sync(self, checkpoint: Checkpoint | None = None) -> int:
        self.request_flush(checkpoint)
        return self._acked

    def close(self) -> None:
        self.output.close()

    def discard(self) -> None:
        if isinstance(self.output, DiscardingOutput):
            self.output.discard()
        else:
            self.output.close()


class _Flush:
    """A flush request in the queue; ``done`` is set once the worker handled it. Its
    checkpoint never changes once queued: it covers only what was queued before it."""

    def __init__(self, checkpoint: Checkpoint | None) -> None:
        self.checkpoint = checkpoint
        self.done = threading.Event()


_STOP = object()


class ThreadedSink(InlineSink):
    """The output's calls (after ``open``) all happen on one worker thread, in queue order,
    except the encoding of a :class:`PreEncodingOutput`, done on the engine thread."""

    def __init__(self, output: Output, clock: Clock, attempts: int, max_batches: int,
                 metrics: MetricsSink | None = None,
                 may_write: Callable[[], bool] = lambda: True) -> None:
        super().__init__(output, clock, attempts, metrics)
        self._may_write = may_write
        """Asked before each queued item: a deposed leader's queue is dropped, not written,
        also for an output that is not a FencedOutput."""
        self._queue: queue.Queue[object] = queue.Queue(maxsize=max_batches)
        self._error: BaseException | None = None
        self._flush_pending: _Flush | None = None
        self._dropping = False
        self._thread: threading.Thread | None = None
        self._encoder = output if isinstance(output, PreEncodingOutput) else None

    def open(self, committed_seq: int) -> None:
        super().open(committed_seq)
        self._thread = threading.Thread(target=self._work, name=f"dblog-output-{self.name}",
                                        daemon=True)
        self._thread.start()

    def write(self, batch: Sequence[ChangeEvent]) -> None:
        if self._encoder is not None:
            self._put(self._encoder.encode(batch))
        else:
            self._put(list(batch))

    def request_flush(self, checkpoint: Checkpoint | None = None) -> None:
        if self._flush_pending is None:  # one outstanding flush is enough
            self._flush_pending = _Flush(checkpoint)
            self._put(self._flush_pending)

    def acknowledged(self) -> int:
        self._raise()
        return self._acked

    def sync(self, checkpoint: Checkpoint | None = None) -> int:
        flush = _Flush(checkpoint)
        self._put(flush)
        while not flush.done.wait(_PUT_WAIT_S):
            self._raise()
        self._raise()
        return self._acked

    def close(self) -> None:
        self._stop()
        if isinstance(self._error, LeadershipLost):  # it dropped a batch: write nothing more
            super().discard()
        elif self._error is None:
            self.output.close()

    def discard(self) -> None:
        self._dropping = True  # the worker drops what is queued
        self._stop()
        super().discard()

    def _put(self, item: object) -> None:
        """Queue ``item``, waiting while the queue is full, unless the worker failed."""
        while True:
            self._raise()
            if not self._may_write():
                raise LeadershipLost(f"leadership lost: nothing more is handed to {self.name}")
            try:
                self._queue.put(item, timeout=_PUT_WAIT_S)
                return
            except queue.Full:
                continue

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _stop(self) -> None:
        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        while thread.is_alive():
            try:
                self._queue.put(_STOP, timeout=_PUT_WAIT_S)
                break
            except queue.Full:
                continue
        thread.join()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            if self._error is None and not self._dropping and not self._may_write():
                # sticky: the lease may be valid again before the engine thread looks, and
                # nothing after a dropped item may be acknowledged (SPEC 8)
                self._error = LeadershipLost(
                    f"leadership lost: {self.name} dropped what was queued")
            if self._error is not None or self._dropping:
                self._release(item)
                continue
            try:
                self._handle(item)
            except BaseException as exc:  # kept for the engine thread, raised at its next call
                self._error = exc
                log.error("output %s failed: %s", self.name, exc)
                self._release(item)

    def _handle(self, item: object) -> None:
        if isinstance(item, _Flush):
            self._acked = self._flush(item.checkpoint)
            self._release(item)
        elif isinstance(item, EncodedBatch):
            encoder = self._encoder
            assert encoder is not None
            self._call("write", lambda: encoder.write_encoded(item))
        else:
            assert isinstance(item, list)
            InlineSink.write(self, item)

    def _release(self, item: object) -> None:
        if isinstance(item, _Flush):
            if item is self._flush_pending:
                self._flush_pending = None
            item.done.set()
