"""The dump scheduler (steps 2-4 and 7 of the algorithm): which chunk comes next, the chunk
jobs read ahead of the open window, the window itself, and what happens when it closes.

The scheduler is one part of the engine, built with explicit collaborators and no log reader:

* a :class:`~dblog.spi.ChunkReader` for table metadata and upper bounds (engine thread);
* a :class:`~dblog.engine.jobs.Runner` that carries out chunk jobs (L, the SELECT, H);
* an :class:`Outlet` (the engine's delivery) that takes the surviving rows and records dump
  state, and a ``record_progress`` callback that records a dump's progress at the last
  transaction boundary (the loop knows where that is);
* the :class:`~dblog.core.recent.RecentTransactions` the loop fills, for the snapshot guard.

The loop feeds it log changes (:meth:`on_change`) and watermarks (:meth:`on_watermark`) and
calls :meth:`turn` once per loop turn. Everything runs on the engine thread.
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

from dblog.core import dumps as dumpops
from dblog.core.acks import with_dump_state
from dblog.core.chunkmemory import chunk_rows, row_bytes
from dblog.core.dumprequests import validated_range_dump
from dblog.core.dumps import ChunkPlan, Dump, DumpState
from dblog.core.model import ChangeEvent, Op, TableId, TableInfo, Watermark
from dblog.core.positions import Position
from dblog.core.recent import RecentTransactions
from dblog.core.window import (
    ChunkWindow,
    guard_forwarded,
    on_change,
    on_watermark,
    open_window,
    surviving_rows,
)
from dblog.engine.jobs import READ_AHEAD_DEPTH, ChunkJob, JobSpec, Runner, following
from dblog.engine.outlet import OpenChunk, Outlet, log_skipped
from dblog.engine.settings import EngineSettings, Knobs
from dblog.errors import DblogError, DumpRequestError, FatalSourceError, TableChanged
from dblog.spi import Chunk, ChunkReader, Clock, ForgettingChunkReader, KeyListParser

log = logging.getLogger("dblog.engine")

TABLE_CHANGES_RETRIED = 3  # chunks of a dump in a row read again after TableChanged


class DumpScheduler:
    def __init__(self, settings: EngineSettings, knobs: Knobs, clock: Clock, chunks: ChunkReader,
                 runner: Runner, outlet: Outlet, record_progress: Callable[[Dump], None],
                 recent: RecentTransactions) -> None:
        self.settings, self.knobs, self.clock = settings, knobs, clock
        self.chunks, self.runner, self.outlet = chunks, runner, outlet
        self.record_progress = record_progress
        self.recent = recent
        self.discarded: Callable[[TableId, str], None] = lambda table, reason: None
        """Told of each chunk read again, with the reason (the engine counts them)."""
        self.live = dumpops.DumpQueue()
        self.open: OpenChunk | None = None
        self.ahead: deque[ChunkJob] = deque()
        self.tables: dict[TableId, TableInfo] = {}
        self.row_bytes: dict[TableId, float] = {}
        """The mean encoded size of each table's rows, learned from its chunks."""
        self.next_chunk_at = 0.0
        self.jobs_this_turn = 0
        self.table_changes: dict[str, int] = {}  # per dump, reset by a chunk read
        self.forgetting: list[ForgettingChunkReader] = (  # the engine adds the jobs' reader
            [chunks] if isinstance(chunks, ForgettingChunkReader) else [])

    # -- the loop's calls ---------------------------------------------------------------------

    def turn(self) -> None:
        """One loop turn's dump step: start a chunk, read ahead, or raise a failed job's error."""
        self.jobs_this_turn = 0
        self.skip_empty_jobs()
        if self.open is None and not self.ahead:
            self._maybe_start_chunk()
        elif self.open is not None:
            self._read_ahead()
        elif self.ahead[0].future.done() and self.ahead[0].future.exception() is not None:
            self._materialize()  # raises the job's error
        self.runner.pump()

    def windowing(self) -> bool:
        """Whether a window is open or chunk jobs wait ahead (log changes must be applied)."""
        return self.open is not None or bool(self.ahead)

    def due_in(self) -> float | None:
        """Seconds until the next dump step waits for nothing but the chunk delay (None: no
        such step is pending). The loop must not wait longer for the log than this, or every
        chunk would cost a whole poll timeout on an idle source."""
        if self.open is not None or self.ahead or self.live.active() is None:
            return None
        return max(0.0, self.next_chunk_at - self.clock.monotonic())

    def busy(self) -> bool:
        """A chunk is in flight: the loop should look at its results again soon."""
        return self.runner.busy()

    def on_change(self, item: ChangeEvent) -> None:
        """A row or table change from the log (only while :meth:`windowing`)."""
        if self.open is None and self.ahead and item.table == self.ahead[0].table:
            self._materialize()  # its pending transactions may evict rows already
        if self.open is not None:
            self.open.window = on_change(self.open.window, item)

    def on_watermark(self, mark: Watermark) -> None:
        self.skip_empty_jobs()
        if self.ahead and mark.value == self.ahead[0].low:
            if self.open is not None:  # windows are written one after the other
                raise FatalSourceError(
                    f"the high watermark of a chunk of {self.open.plan.table} was not seen "
                    "before the next chunk's low watermark")
            self._materialize()
        if self.open is None:
            return
        window, closed = on_watermark(self.open.window, mark.value)
        self.open.window = window
        if closed:
            self._close_chunk(mark.position)

    def check_window(self, idle_s: float | None) -> None:
        """Fail when the log stays idle for ``window_timeout_s`` while a window waits for its
        watermarks (a busy log, e.g. catching up a backlog, is not a reason)."""
        waiting: OpenChunk | ChunkJob | None = self.open if self.open is not None else (
            self.ahead[0] if self.ahead else None)
        if waiting is None:
            return
        waiting.idle_s = 0.0 if idle_s is None else waiting.idle_s + idle_s
        if waiting.idle_s > self.settings.window_timeout_s:
            which = "high" if isinstance(waiting, OpenChunk) and waiting.window.low_seen \
                else "low"
            table = waiting.plan.table if isinstance(waiting, OpenChunk) else waiting.table
            raise FatalSourceError(
                f"the {which} watermark of a chunk of {table} was not seen: "
                f"the log was idle for {self.settings.window_timeout_s:.0f}s",
                fix="check that the watermark table is captured by the log reader",
            )

    def log_progress(self, stream_seq: int) -> None:
        dump = self.live.active()
        if dump is None or dump.internal:
            return
        total = sum(t.estimated_rows for t in dump.tables)
        log.info("dump %s: %d rows in %d chunks (~%d estimated), stream seq %d", dump.id,
                 dump.rows, dump.chunks, total, stream_seq)

    # -- control (commands, engine thread) ------------------------------------------------------

    def validated(self, tables: Sequence[str | TableId] | None, table: str | TableId | None,
                  keys: Sequence[Sequence[object]] | None) -> Dump:
        """A dump for a request, checked against the source; raises DumpRequestError."""
        chunks = self.chunks
        parse_keys = chunks.parse_keys if isinstance(chunks, KeyListParser) else None
        return dumpops.validated_dump(chunks, self.table_info, tables, table, keys,
                                      on_skip=log_skipped, parse_keys=parse_keys)

    def validated_range(self, table: str | TableId | None, key_from: Sequence[object] | None,
                        key_to: Sequence[object] | None) -> Dump:
        """A key-range dump for a request, checked against the source like key dumps."""
        chunks = self.chunks
        parse_keys = chunks.parse_keys if isinstance(chunks, KeyListParser) else None
        return validated_range_dump(chunks, self.table_info, table, key_from, key_to,
                                    parse_keys=parse_keys)

    def accept(self, dump: Dump) -> None:
        """Queue a validated dump and make it durable at once."""
        self.outlet.commit()
        self.live = self.live.add(dump)
        self.outlet.update_committed(lambda s: replace(s, dumps=s.dumps.add(dump)))
        log.info("dump %s queued: %s", dump.id, ", ".join(str(t.table) for t in dump.tables))

    def change_state(self, dump_id: str, state: DumpState) -> None:
        """Pause, resume or cancel a dump between chunks; raises DumpRequestError."""
        dump = self.live.get(dump_id)
        if dump is None:
            raise DumpRequestError(f"no dump with id {dump_id!r}")
        if dump.state in (DumpState.DONE, DumpState.CANCELLED, DumpState.FAILED):
            raise DumpRequestError(f"dump {dump_id} is already {dump.state.value}")
        self._drop_dump_reads(dump_id)  # progress stays before the open window
        self._set_live(dumpops.set_state(dump, state))

    def table_info(self, table: TableId) -> TableInfo:
        if table not in self.tables:
            self.tables[table] = self.chunks.table_info(table)
        return self.tables[table]

    # -- starting chunks -----------------------------------------------------------------------

    def _set_live(self, dump: Dump) -> None:
        """Change a dump's state now; its committed progress still moves only with acks."""
        self.live = self.live.put(dump)
        self.outlet.commit()
        self.outlet.update_committed(lambda state: with_dump_state(state, dump))

    def _maybe_start_chunk(self) -> None:
        if self.clock.monotonic() < self.next_chunk_at:
            return
        dump = self.live.active()
        if dump is None:
            return
        plan = dumpops.next_chunk(dump, self.knobs.chunk_size)
        if plan is None:
            self._set_live(dumpops.set_state(dump, DumpState.DONE))
            return
        try:
            if plan.needs_start:
                self._start_table(dump, plan.table)
            else:
                self._open_chunk(plan)
        except Exception as exc:
            self._step_failed(dump.id, plan.table, exc)

    def _start_table(self, dump: Dump, table: TableId) -> None:
        info = self.table_info(table)
        upper = self.chunks.max_key(info)
        started = dumpops.start_table(dump, table, upper, info.estimated_rows)
        self.live = self.live.put(started)
        self.record_progress(started)
        log.info("dump %s: %s up to key %s (~%d rows)", dump.id, table,
                 started.tables[0].upper_key if dump.key_range else upper, info.estimated_rows)

    def _open_chunk(self, plan: ChunkPlan) -> None:
        """Submit the chunk's L, SELECT, H; the window opens when L (or a change to the table)
        arrives in the log, at most one SELECT later (I4)."""
        self._submit(plan.table, plan.dump_id, lambda limit: plan, self.table_info(plan.table))

    def _submit(self, table: TableId, dump_id: str,
                plan_for: Callable[[int], ChunkPlan | None], info: TableInfo) -> None:
        low, high = f"L-{uuid.uuid4().hex}", f"H-{uuid.uuid4().hex}"
        width = self.row_bytes.get(table, info.extra.get("row_bytes"))
        limit = chunk_rows(self.knobs.chunk_size, width)  # bounded memory
        future = self.runner.submit(JobSpec(plan_for, info, low, high, limit))
        self.ahead.append(ChunkJob(table, dump_id, low, high, limit, future))
        self.jobs_this_turn += 1  # I4: inline, at most one chunk is read per loop turn

    def _prefetch(self) -> None:
        """Submit the next plain chunk now. Starting a table or finishing a dump records state,
        which must wait until this chunk's rows are emitted, so those wait for the loop."""
        dump = self.live.active()
        plan = None if dump is None else dumpops.next_chunk(dump, self.knobs.chunk_size)
        if plan is None or plan.needs_start or self.ahead or not self._may_read_ahead():
            return
        try:
            self._open_chunk(plan)
        except Exception:
            return  # the loop plans it again and fails the dump there

    def _may_read_ahead(self) -> bool:
        """Room ahead, no delay asked for, and (inline, I4) no chunk read this turn yet."""
        if self.knobs.chunk_delay_s != 0:
            return False
        if self.settings.chunk_worker:
            return len(self.ahead) < READ_AHEAD_DEPTH
        return not self.ahead and not self.jobs_this_turn

    def _read_ahead(self) -> None:
        """Queue the chunks after the open one, so the source reads them while the window
        waits for its high watermark: each starts after the previous SELECT's last key and
        writes its L after the previous H."""
        chunk = self.open
        if chunk is None or chunk.window.discarded:
            return
        while self._may_read_ahead():
            before = self.ahead[-1] if self.ahead else chunk.job
            dump = self.live.active()
            if before.empty() or dump is None or dump.id != before.dump_id \
                    or chunk.plan.keys is not None:
                return
            self._submit(before.table, before.dump_id, partial(following, before),
                         self.table_info(before.table))

    def _step_failed(self, dump_id: str, table: TableId, exc: Exception) -> None:
        """A dump step failed; TableChanged is retried with fresh metadata, a few times."""
        changes = self.table_changes.get(dump_id, 0)
        if not isinstance(exc, TableChanged) or changes >= TABLE_CHANGES_RETRIED:
            self._fail_dump(dump_id, exc)
            return
        self.table_changes[dump_id] = changes + 1
        log.warning("dump %s: %s changed while it was read (%s); reading it again with "
                    "its metadata read afresh", dump_id, table, exc.message)
        self.tables.pop(table, None)
        for reader in self.forgetting:
            reader.forget_table(table)
        self._drop_dump_reads(dump_id)
        self.discarded(table, "the table's columns changed while it was read")

    def _fail_dump(self, dump_id: str, exc: Exception) -> None:
        """A dump step (a table's start, a chunk job) failed: the dump fails alone, with the
        reason in the state and the status, and is never run again; the log goes on. A
        retryable error is raised instead (the restart resumes the dump), and so is anything
        that is not an ``Exception`` (the error of the step is its own, not the pipeline's)."""
        if isinstance(exc, DblogError) and exc.retryable:
            raise exc
        if not isinstance(exc, DblogError):  # a connector's bug: wrapped where it surfaced
            log.error("dump %s: unexpected %s while reading", dump_id, type(exc).__name__,
                      exc_info=exc)
            exc = DumpRequestError(f"{type(exc).__name__}: {exc}")
        self._drop_dump_reads(dump_id)
        dump = self.live.get(dump_id)
        if dump is not None and dump.state in dumpops.ACTIVE_STATES:
            log.error("dump %s failed: %s", dump_id, exc)
            self._set_live(dumpops.set_state(dump, DumpState.FAILED, str(exc)))

    # -- jobs and windows ----------------------------------------------------------------------

    def skip_empty_jobs(self) -> None:
        while self.ahead and self.ahead[0].empty():
            self.ahead.popleft()

    def _drop_dump_reads(self, dump_id: str) -> None:  # its open window is never emitted
        self._drop_jobs(dump_id)
        if self.open is not None and self.open.plan.dump_id == dump_id:
            self.open = None

    def _drop_jobs(self, dump_id: str) -> None:
        """Forget the chunks read ahead for ``dump_id``: their watermarks pass as unknown
        values; jobs not started yet are cancelled (and so are the ones following them)."""
        for job in self.ahead:
            if job.dump_id == dump_id:
                job.future.cancel()
        self.ahead = deque(j for j in self.ahead if j.dump_id != dump_id)

    def _materialize(self) -> None:
        """Turn the first job ahead into the open window, waiting for its SELECT if needed."""
        job = self.ahead.popleft()
        assert self.open is None
        self.runner.wait(job.future)
        try:
            read = job.read()
            if read is None:
                return
            plan, chunk = read
            # rows may be decoded only now (lazily): a row the source cannot decode fails here
            window = self._guard_forwarded(
                open_window(plan.table, job.low, job.high, chunk.rows, chunk.pending_txids),
                chunk)
        except Exception as exc:
            self._step_failed(job.dump_id, job.table, exc)
            return
        self.table_changes.pop(job.dump_id, None)
        width = row_bytes(chunk.rows)
        if width is not None:
            self.row_bytes[plan.table] = width
        self.open = OpenChunk(plan, window, len(chunk.rows), job.limit, job)
        if self.settings.chunk_worker:
            self._read_ahead()  # keep the source busy while this window waits for H

    def _guard_forwarded(self, window: ChunkWindow, chunk: Chunk) -> ChunkWindow:
        return guard_forwarded(window, self.recent.keys_of, chunk.logged_txids,
                               self.recent.why_unknown)

    def _close_chunk(self, high_position: Position | None) -> None:
        assert self.open is not None
        chunk, self.open = self.open, None
        window, plan = chunk.window, chunk.plan
        self.next_chunk_at = self.clock.monotonic() + self.knobs.chunk_delay_s
        dump = self.live.get(plan.dump_id)
        if dump is None or dump.state not in dumpops.ACTIVE_STATES or window.discarded:
            self._drop_jobs(plan.dump_id)  # read ahead of a chunk that does not count
            if dump is not None and dump.state in dumpops.ACTIVE_STATES:
                reason = window.discard_reason or "discarded"
                log.info("chunk of %s read again: %s", plan.table, reason)
                self.discarded(plan.table, reason)
            return
        rows = surviving_rows(window)
        dump = dumpops.complete_chunk(dump, plan, window.last_key, chunk.selected, len(rows),
                                      chunk.limit)
        self.live = self.live.put(dump)
        refetch = self._queue_refetch(window)
        if self.knobs.chunk_delay_s == 0:
            self._prefetch()  # the next chunk is read while these rows are emitted
        table, dump_id, read = plan.table, plan.dump_id, Op.READ
        self.outlet.emit_all([ChangeEvent(read, table, key, None, row, high_position, None,
                                          None, None, (), dump_id) for key, row in rows])
        # hand each chunk to the outputs at once: the output work then falls evenly on every
        # chunk and hides the next window's round trip (batches of two 1000-row chunks left
        # every other turn waiting for it: 181-214k against 219-257k rows/s)
        self.outlet.deliver()
        if refetch is not None:
            self.record_progress(refetch)
        self.record_progress(dump)
        if dump.state is DumpState.DONE:
            log.info("dump %s done: %d rows in %d chunks", dump.id, dump.rows, dump.chunks)
            self.outlet.commit()  # a finished dump is made durable at once

    def _queue_refetch(self, window: ChunkWindow) -> Dump | None:
        """Keys whose forwarded image was partial are read again, first."""
        if not window.refetch:
            return None
        refetch = dumpops.keys_dump(window.table, sorted(window.refetch, key=repr),
                                    internal=True)
        self.live = self.live.add(refetch, front=True)
        return refetch
