"""The dump side of the engine (steps 2-4 of the algorithm): when the next chunk starts, the
chunk jobs queued ahead of the open window, and how a job becomes the open window.

:class:`ChunkScheduling` is a part of :class:`dblog.engine.Engine`, kept in its own module; it
works on the engine's state, declared at the top of the class.
"""

from __future__ import annotations

import logging
import queue
import sys
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from dblog.core import dumps as dumpops
from dblog.core.acks import with_dump_state
from dblog.core.dumps import ChunkPlan, Dump, DumpState
from dblog.core.model import TableId, TableInfo
from dblog.core.recent import RecentTransactions
from dblog.core.window import ChunkWindow, guard_forwarded, open_window
from dblog.engine.delivery import Delivery
from dblog.engine.jobs import (
    READ_AHEAD_DEPTH,
    ChunkJob,
    JobSpec,
    Runner,
    ThreadRunner,
    WindowRunner,
    following,
)
from dblog.engine.settings import EngineSettings, PhaseHooks
from dblog.errors import DumpRequestError
from dblog.spi import Chunk, ChunkReader, Clock, WatermarkWriter, WindowChunkReader

log = logging.getLogger("dblog.engine")


@dataclass
class OpenChunk:
    plan: ChunkPlan
    window: ChunkWindow
    selected: int
    limit: int
    job: ChunkJob
    idle_s: float = 0.0


def waiting_table(waiting: OpenChunk | ChunkJob) -> TableId:
    return waiting.plan.table if isinstance(waiting, OpenChunk) else waiting.table


@dataclass
class Knobs:
    chunk_size: int
    chunk_delay_s: float
    commands: queue.SimpleQueue[Callable[[], None]] = field(default_factory=queue.SimpleQueue)


class ChunkScheduling:
    """Starting chunks, reading ahead, and opening windows (a part of the engine)."""

    settings: EngineSettings
    knobs: Knobs
    clock: Clock
    hooks: PhaseHooks
    delivery: Delivery
    live: dumpops.DumpQueue
    _open: OpenChunk | None
    _ahead: deque[ChunkJob]
    _runner: Runner
    _chunks: ChunkReader
    _job_chunks: ChunkReader
    _job_marks: WatermarkWriter
    _tables: dict[TableId, TableInfo]
    _recent: RecentTransactions
    _next_chunk_at: float
    _jobs_this_turn: int

    def _set_live(self, dump: Dump) -> None:
        """Change a dump's state now; its committed progress still moves only with acks."""
        self.live = self.live.put(dump)
        self.delivery.commit()
        self.delivery.update_committed(lambda state: with_dump_state(state, dump))

    def _mark_dump(self, dump: Dump) -> None:
        raise NotImplementedError  # the engine's: dump progress at a transaction boundary

    def _overlapping_runner(self) -> Runner:
        """Windows sent and collected by the engine thread when the reader can (no lock
        contention); else a worker thread (then a short switch interval, see the setting)."""
        reader = self._job_chunks
        if isinstance(reader, WindowChunkReader) and reader.writes_windows \
                and not self.hooks.after_low and not self.hooks.before_high:
            return WindowRunner(reader, self._read_planned)
        if self.settings.switch_interval_s is not None:
            sys.setswitchinterval(self.settings.switch_interval_s)
        return ThreadRunner(self._read_planned)

    def _maybe_start_chunk(self) -> None:
        if self.clock.monotonic() < self._next_chunk_at:
            return
        dump = self.live.active()
        if dump is None:
            return
        plan = dumpops.next_chunk(dump, self.knobs.chunk_size)
        try:
            if plan is None:
                self._set_live(dumpops.set_state(dump, DumpState.DONE))
            elif plan.needs_start:
                self._start_table(dump, plan.table)
            else:
                self._open_chunk(plan)
        except DumpRequestError as exc:
            log.error("dump %s failed: %s", dump.id, exc)
            self._set_live(dumpops.set_state(dump, DumpState.FAILED, str(exc)))

    def _table_info(self, table: TableId) -> TableInfo:
        if table not in self._tables:
            self._tables[table] = self._chunks.table_info(table)
        return self._tables[table]

    def _start_table(self, dump: Dump, table: TableId) -> None:
        info = self._table_info(table)
        upper = self._chunks.max_key(info)
        started = dumpops.start_table(dump, table, upper, info.estimated_rows)
        self.live = self.live.put(started)
        self._mark_dump(started)
        log.info("dump %s: %s up to key %s (~%d rows)", dump.id, table, upper,
                 info.estimated_rows)

    def _open_chunk(self, plan: ChunkPlan) -> None:
        """Submit the chunk's L, SELECT, H; the window opens when L (or a change to the table)
        arrives in the log, at most one SELECT later (I4)."""
        info = self._table_info(plan.table)
        self._submit(plan.table, plan.dump_id, lambda limit: plan, info)

    def _submit(self, table: TableId, dump_id: str,
                plan_for: Callable[[int], ChunkPlan | None], info: TableInfo) -> None:
        low, high = f"L-{uuid.uuid4().hex}", f"H-{uuid.uuid4().hex}"
        limit = self.knobs.chunk_size
        future = self._runner.submit(JobSpec(plan_for, info, low, high, limit))
        self._ahead.append(ChunkJob(table, dump_id, low, high, limit, future))
        self._jobs_this_turn += 1  # I4: inline, at most one chunk is read per loop turn

    def _prefetch(self) -> None:
        """Submit the next plain chunk now. Starting a table or finishing a dump records state,
        which must wait until this chunk's rows are emitted, so those wait for the loop."""
        dump = self.live.active()
        plan = None if dump is None else dumpops.next_chunk(dump, self.knobs.chunk_size)
        if plan is None or plan.needs_start or self._ahead or not self._may_read_ahead():
            return
        self._submit_ahead(plan)

    def _read_planned(self, plan: ChunkPlan, spec: JobSpec) -> Chunk:
        """Steps 2-4, blocking (inline, or in the chunk worker)."""
        info, low, high, limit = spec.info, spec.low, spec.high, spec.limit
        self._job_marks.write(low)
        if self.hooks.after_low:
            self.hooks.after_low(plan)
        if plan.keys is not None:
            chunk = self._job_chunks.read_keys(info, plan.keys)
        else:
            chunk = self._job_chunks.read_chunk(info, plan.after, plan.upper, limit)
        if self.hooks.before_high:
            self.hooks.before_high(plan)
        self._job_marks.write(high)
        return chunk

    def _skip_empty_jobs(self) -> None:
        while self._ahead and self._ahead[0].empty():
            self._ahead.popleft()

    def _drop_jobs(self, dump_id: str) -> None:
        """Forget the chunks read ahead for ``dump_id``: their watermarks pass as unknown
        values; jobs not started yet are cancelled (and so are the ones following them)."""
        for job in self._ahead:
            if job.dump_id == dump_id:
                job.future.cancel()
        self._ahead = deque(j for j in self._ahead if j.dump_id != dump_id)

    def _materialize(self) -> None:
        """Turn the first job ahead into the open window, waiting for its SELECT if needed."""
        job = self._ahead.popleft()
        assert self._open is None
        self._runner.wait(job.future)
        try:
            read = job.read()
        except DumpRequestError as exc:
            self._drop_jobs(job.dump_id)
            dump = self.live.get(job.dump_id)
            if dump is not None:
                log.error("dump %s failed: %s", dump.id, exc)
                self._set_live(dumpops.set_state(dump, DumpState.FAILED, str(exc)))
            return
        if read is None:
            return
        plan, chunk = read
        window = self._guard_forwarded(
            open_window(plan.table, job.low, job.high, chunk.rows, chunk.pending_txids), chunk)
        self._open = OpenChunk(plan, window, len(chunk.rows), job.limit, job)
        if self.settings.chunk_worker:
            self._read_ahead()  # keep the worker busy while this window waits for H

    def _may_read_ahead(self) -> bool:
        """Room ahead, no delay asked for, and (inline, I4) no chunk read this turn yet."""
        if self.knobs.chunk_delay_s != 0:
            return False
        if self.settings.chunk_worker:
            return len(self._ahead) < READ_AHEAD_DEPTH
        return not self._ahead and not self._jobs_this_turn

    def _read_ahead(self) -> None:
        """Queue the chunks after the open one, so the worker reads them while the window waits
        for its high watermark: each starts after the previous SELECT's last key and writes its
        L after the previous H."""
        chunk = self._open
        if chunk is None or chunk.window.discarded:
            return
        while self._may_read_ahead():
            before = self._ahead[-1] if self._ahead else chunk.job
            dump = self.live.active()
            if before.empty() or dump is None or dump.id != before.dump_id \
                    or chunk.plan.keys is not None:
                return
            self._submit(before.table, before.dump_id, partial(following, before),
                         self._table_info(before.table))

    def _submit_ahead(self, plan: ChunkPlan) -> None:
        try:
            self._open_chunk(plan)
        except DumpRequestError:
            return  # the loop plans it again and fails the dump there

    def _guard_forwarded(self, window: ChunkWindow, chunk: Chunk) -> ChunkWindow:
        guarded = guard_forwarded(window, self._recent.keys_of, chunk.logged_txids)
        if guarded.discarded:
            log.info("chunk of %s discarded: a transaction invisible to its SELECT is too large "
                     "to index, or was logged but never seen by this run (forwarded before a "
                     "restart); reading it again", window.table)
        return guarded
