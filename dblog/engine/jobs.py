"""Chunk jobs (steps 2-4: L, the SELECT, H) and the runners that carry them out.

A job is submitted before its window opens; the engine keeps up to ``READ_AHEAD_DEPTH`` of them
ahead of the open window. A job that follows another learns its plan from that one's SELECT
(the next chunk starts after the last key it returned), so the source can work on chunk k+1
while the engine still waits for chunk k's high watermark. Runners:

* :class:`InlineRunner`: runs a job at once in the engine thread (deterministic tests).
* :class:`ThreadRunner`: one worker thread, for readers that block.
* :class:`WindowRunner`: for a :class:`~dblog.spi.WindowChunkReader`: sends a job's statements
  and collects the results from the engine thread without blocking, one job at a time, so no
  second thread competes with the engine for the interpreter lock.
"""

from __future__ import annotations

import select
from collections import deque
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Protocol

from dblog.core import dumps as dumpops
from dblog.core.dumps import ChunkPlan
from dblog.core.model import TableId, TableInfo
from dblog.engine.settings import PhaseHooks
from dblog.spi import Chunk, ChunkReader, PendingWindow, WatermarkWriter, WindowChunkReader

ReadChunk = tuple[ChunkPlan, Chunk]
READ_AHEAD_DEPTH = 2


@dataclass(frozen=True)
class JobSpec:
    """What a job reads: ``plan_for(limit)`` gives its plan when it starts (None: nothing)."""

    plan_for: Callable[[int], ChunkPlan | None]
    info: TableInfo
    low: str
    high: str
    limit: int


# reads one planned chunk, blocking (L, SELECT, H through the reader and the watermark writer)
BlockingRead = Callable[[ChunkPlan, JobSpec], Chunk]


@dataclass
class ChunkJob:
    """A chunk being read for a window not opened yet; it resolves to None when there is no
    next chunk (and then writes no watermarks)."""

    table: TableId
    dump_id: str
    low: str
    high: str
    limit: int
    future: Future[ReadChunk | None]
    idle_s: float = 0.0

    def read(self) -> ReadChunk | None:
        """The job's plan and chunk (None: nothing read); job errors are raised."""
        return self.future.result()

    def empty(self) -> bool:
        """Done without reading anything (a follow-on job past the table's end, or dropped)."""
        return self.future.cancelled() or (
            self.future.done() and self.future.exception() is None
            and self.future.result() is None)


def following(before: ChunkJob, limit: int) -> ChunkPlan | None:
    """The plan of the chunk after ``before`` (called once ``before`` is done)."""
    try:
        read = before.read()
    except (CancelledError, Exception):
        return None  # the engine raises or handles that job's error itself
    if read is None:
        return None
    plan, chunk = read
    last_key = chunk.rows[-1][0] if chunk.rows else None
    return dumpops.following_chunk(plan, last_key, len(chunk.rows), before.limit)


class Runner(Protocol):
    def submit(self, spec: JobSpec) -> Future[ReadChunk | None]: ...

    def pump(self) -> None:
        """Make progress without blocking (engine thread, every loop turn)."""

    def busy(self) -> bool:
        """Whether progress depends on :meth:`pump` (the loop then polls the log briefly)."""
        ...

    def wait(self, future: Future[ReadChunk | None]) -> None: ...

    def shutdown(self) -> None: ...


def _run(read: BlockingRead, spec: JobSpec) -> ReadChunk | None:
    plan = spec.plan_for(spec.limit)
    return None if plan is None else (plan, read(plan, spec))


class InlineRunner:
    def __init__(self, read: BlockingRead) -> None:
        self.read = read

    def submit(self, spec: JobSpec) -> Future[ReadChunk | None]:
        future: Future[ReadChunk | None] = Future()
        try:
            future.set_result(_run(self.read, spec))
        except BaseException as exc:  # delivered through the future, like the other runners
            future.set_exception(exc)
        return future

    def pump(self) -> None:
        pass

    def busy(self) -> bool:
        return False

    def wait(self, future: Future[ReadChunk | None]) -> None:
        pass

    def shutdown(self) -> None:
        pass


class ThreadRunner(InlineRunner):
    def __init__(self, read: BlockingRead) -> None:
        super().__init__(read)
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="dblog-chunks")

    def submit(self, spec: JobSpec) -> Future[ReadChunk | None]:
        return self.executor.submit(_run, self.read, spec)

    def wait(self, future: Future[ReadChunk | None]) -> None:
        wait_futures([future])

    def shutdown(self) -> None:
        self.executor.shutdown(wait=True)


class WindowRunner(InlineRunner):
    """Jobs in submission order, one in flight; a key-list chunk (no window form) is read
    blocking, through ``read``, when its turn comes."""

    def __init__(self, reader: WindowChunkReader, read: BlockingRead) -> None:
        super().__init__(read)
        self.reader = reader
        self._queue: deque[tuple[JobSpec, Future[ReadChunk | None]]] = deque()
        self._current: tuple[PendingWindow, ChunkPlan, Future[ReadChunk | None]] | None = None

    def submit(self, spec: JobSpec) -> Future[ReadChunk | None]:
        future: Future[ReadChunk | None] = Future()
        self._queue.append((spec, future))
        self.pump()
        return future

    def busy(self) -> bool:
        return self._current is not None or bool(self._queue)

    def pump(self) -> None:
        if self._current is not None:
            pending, plan, future = self._current
            try:
                chunk = pending.collect()
            except BaseException as exc:
                self._current = None
                future.set_exception(exc)
            else:
                if chunk is not None:
                    self._current = None
                    future.set_result((plan, chunk))
        while self._current is None and self._queue:
            self._start(*self._queue.popleft())

    def _start(self, spec: JobSpec, future: Future[ReadChunk | None]) -> None:
        if not future.set_running_or_notify_cancel():
            return  # dropped before it started
        try:
            plan = spec.plan_for(spec.limit)
            if plan is None or plan.keys is not None:
                future.set_result(None if plan is None else (plan, self.read(plan, spec)))
                return
            pending = self._start_window(spec, plan)
        except BaseException as exc:
            future.set_exception(exc)
            return
        self._current = (pending, plan, future)

    def _start_window(self, spec: JobSpec, plan: ChunkPlan) -> PendingWindow:
        args = (spec.low, spec.high, spec.info, plan.after, plan.upper, spec.limit)
        if plan.inclusive:  # (as in BlockingChunkRead: only when set)
            return self.reader.start_chunk_window(*args, True)
        return self.reader.start_chunk_window(*args)

    def wait(self, future: Future[ReadChunk | None]) -> None:
        while True:
            self.pump()
            if future.done():
                return
            if self._current is None:
                raise RuntimeError("a chunk job waited for is not queued in this runner")
            select.select([self._current[0].fileno()], [], [], 1.0)

    def shutdown(self) -> None:
        for _, future in self._queue:
            future.cancel()
        self._queue.clear()
        self._current = None  # the reader's connection is closed right after


class BlockingChunkRead:
    """Steps 2-4 of one chunk, blocking: L, the SELECT (a key range or a key list), H, through
    the job's own chunk reader and watermark writer (inline, or in the worker thread)."""

    def __init__(self, chunks: ChunkReader, marks: WatermarkWriter, hooks: PhaseHooks) -> None:
        self.chunks, self.marks, self.hooks = chunks, marks, hooks

    def __call__(self, plan: ChunkPlan, spec: JobSpec) -> Chunk:
        self.marks.write(spec.low)
        if self.hooks.after_low:
            self.hooks.after_low(plan)
        if plan.keys is not None:
            chunk = self.chunks.read_keys(spec.info, plan.keys)
        else:
            chunk = self._read(spec, plan)
        if self.hooks.before_high:
            self.hooks.before_high(plan)
        self.marks.write(spec.high)
        return chunk


    def _read(self, spec: JobSpec, plan: ChunkPlan) -> Chunk:
        if plan.inclusive:  # the flag is passed only when set: readers written before it
            return self.chunks.read_chunk(spec.info, plan.after, plan.upper, spec.limit, True)
        return self.chunks.read_chunk(spec.info, plan.after, plan.upper, spec.limit)


def overlapping_runner(read: BlockingChunkRead, hooks: PhaseHooks) -> Runner:
    """Windows sent and collected by the engine thread when the reader can (no second thread
    competing for the interpreter lock); else a worker thread."""
    reader = read.chunks
    if isinstance(reader, WindowChunkReader) and reader.writes_windows \
            and not hooks.after_low and not hooks.before_high:
        return WindowRunner(reader, read)
    return ThreadRunner(read)
