"""The engine: interleaves log events with watermark-bracketed dump chunks (SPEC section 2).

One thread runs :meth:`Engine.run`. Each loop turn it applies control commands, starts the next
chunk when no window is open (low watermark, chunk SELECT, high watermark: the only time log
forwarding pauses), then forwards what the log reader has, applying the window's drop rule, and
emits the surviving chunk rows when the high watermark arrives. Outputs are flushed and the state
committed at least every ``flush_interval_s``.
"""

from __future__ import annotations

import gc
import logging
import queue
import sys
import threading
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from dblog import dumps as dumpops
from dblog.acks import PipelineState, with_dump_state
from dblog.chunkjobs import (
    READ_AHEAD_DEPTH,
    ChunkJob,
    InlineRunner,
    JobSpec,
    Runner,
    ThreadRunner,
    WindowRunner,
    following,
)
from dblog.clock import SingleNodeLeadership, SystemClock
from dblog.delivery import Delivery
from dblog.dumps import ChunkPlan, Dump, DumpState
from dblog.errors import DblogError, DumpRequestError, FatalSourceError, LeadershipLost
from dblog.model import TABLE_OPS, ChangeEvent, LogItem, Op, TableId, TableInfo, Watermark
from dblog.positions import Position
from dblog.recent import RecentTransactions
from dblog.settings import EngineSettings, PhaseHooks
from dblog.spi import (
    Chunk,
    Clock,
    LeaderElection,
    Output,
    SourceConnector,
    StateStore,
    WakeableLogReader,
    WindowChunkReader,
)
from dblog.state import state_from_json
from dblog.window import (
    ChunkWindow,
    guard_forwarded,
    on_change,
    on_watermark,
    open_window,
    surviving_rows,
)

__all__ = ["Engine", "EngineSettings", "PhaseHooks"]

log = logging.getLogger("dblog.engine")
_PUMP_INTERVAL_S = 0.0005


@dataclass
class _OpenChunk:
    plan: ChunkPlan
    window: ChunkWindow
    selected: int
    limit: int
    job: ChunkJob
    idle_s: float = 0.0


def _table_of(waiting: _OpenChunk | ChunkJob) -> TableId:
    return waiting.plan.table if isinstance(waiting, _OpenChunk) else waiting.table


@dataclass
class _Transaction:
    begin: ChangeEvent | None = None
    emitted: bool = False


@dataclass
class _Knobs:
    chunk_size: int
    chunk_delay_s: float
    commands: queue.SimpleQueue[Callable[[], None]] = field(default_factory=queue.SimpleQueue)


class Engine:
    def __init__(
        self,
        connector: SourceConnector,
        outputs: Sequence[Output],
        store: StateStore,
        settings: EngineSettings | None = None,
        *,
        clock: Clock | None = None,
        election: LeaderElection | None = None,
        hooks: PhaseHooks | None = None,
    ) -> None:
        self.connector = connector
        self.settings = settings or EngineSettings()
        self.clock = clock or SystemClock()
        self.election = election or SingleNodeLeadership()
        self.hooks = hooks or PhaseHooks()
        self.delivery = Delivery(outputs, store, self.clock, epoch=self.election.epoch,
                                 batch_size=self.settings.batch_size)
        self.delivery.is_leader = self.election.is_leader
        self.store = store
        self.knobs = _Knobs(self.settings.chunk_size, self.settings.chunk_delay_s)
        self.live = dumpops.DumpQueue()
        self._open: _OpenChunk | None = None
        self._ahead: deque[ChunkJob] = deque()
        self._tx = _Transaction()
        self._safe_position: Position | None = None
        self._boundary_seq = 0
        self._tables: dict[TableId, TableInfo] = {}
        self._recent = RecentTransactions(self.settings.recent_keys)
        self._next_chunk_at = 0.0
        self._stop = threading.Event()
        self._jobs_this_turn = 0
        self.running = threading.Event()
        self._wakeable: WakeableLogReader | None = None

    # -- control (any thread) -------------------------------------------------------------

    def request_dump(
        self, tables: Sequence[str | TableId] | None = None, *, table: str | TableId | None = None,
        keys: Sequence[Sequence[Any]] | None = None, dump_id: str | None = None,
    ) -> Future[str]:
        """Queue a dump of ``tables`` (None: all captured tables) or of ``keys`` of ``table``.

        The future resolves to the dump id once the engine validated and stored the request,
        or raises :class:`DumpRequestError`. A given ``dump_id`` makes the request idempotent:
        a dump with that id already in the state is not queued again.
        """
        result: Future[str] = Future()
        self._command(lambda: self._accept_dump(result, tables, table, keys, dump_id))
        return result

    def set_dump_state(self, dump_id: str, state: DumpState) -> Future[str]:
        """Pause (PAUSED), resume (QUEUED) or cancel (CANCELLED) a dump, between chunks."""
        result: Future[str] = Future()
        self._command(lambda: self._change_dump(result, dump_id, state))
        return result

    def set_knobs(self, chunk_size: int | None = None, chunk_delay_s: float | None = None) -> None:
        if chunk_size is not None:
            if chunk_size < 1:
                raise DumpRequestError("chunk_size must be at least 1")
            self.knobs.chunk_size = chunk_size
        if chunk_delay_s is not None:
            self.knobs.chunk_delay_s = max(0.0, chunk_delay_s)

    def stop(self) -> None:
        self._stop.set()
        self._wake()

    def status(self) -> dict[str, Any]:
        state = self.delivery.state
        return {
            "running": self.running.is_set(),
            "committed_position": None if state.position is None else str(state.position),
            "committed_seq": state.seq,
            "emitted_seq": self.delivery.last_seq,
            "dumps": [dumpops.dump_to_json(d) for d in self.live.dumps if not d.internal],
        }

    def _command(self, command: Callable[[], None]) -> None:
        self.knobs.commands.put(command)
        self._wake()

    def _wake(self) -> None:
        """Cut short a poll of an idle log, so a command acts at once (when the reader can)."""
        reader = self._wakeable
        if reader is not None:
            reader.wakeup()

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> PipelineState:
        """Run until :meth:`stop` or the loss of leadership; return the committed state."""
        self.connector.prepare()
        opened: list[Any] = []  # closed in the finally below, even when a later open fails
        switch_interval = sys.getswitchinterval()
        self._runner: Runner = InlineRunner(self._read_planned)
        try:
            reader = self.connector.log_reader()
            opened.append(reader)
            if isinstance(reader, WakeableLogReader):
                self._wakeable = reader
            self._chunks = self.connector.chunk_reader()
            opened.append(self._chunks)
            self._watermarks = self.connector.watermark_writer()
            opened.append(self._watermarks)
            self._job_chunks, self._job_marks = self._chunks, self._watermarks
            if self.settings.chunk_worker:
                self._job_chunks = self.connector.chunk_reader()
                opened.append(self._job_chunks)
                self._job_marks = self.connector.watermark_writer()
                opened.append(self._job_marks)
                self._runner = self._overlapping_runner()
            return self._run(reader)
        finally:
            sys.setswitchinterval(switch_interval)
            self.running.clear()
            self._wakeable = None
            self._runner.shutdown()
            for closeable in opened:
                try:
                    closeable.close()
                except Exception:  # one failed close must not leak the others
                    log.exception("closing %r failed", closeable)

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

    def _run(self, reader: Any) -> PipelineState:
        try:
            self._resume(reader)
            if self.settings.tune_gc:
                # the stream allocates many short-lived, acyclic objects; move what start-up
                # built out of the collector's way and collect young objects less often
                gc.freeze()
                gc.set_threshold(200_000, 50, 50)
            self.running.set()
            try:
                self._loop(reader)
            except LeadershipLost as exc:  # nothing more may reach outputs or the state
                log.warning("%s; committed state stays at seq %d", exc, self.delivery.state.seq)
                return self.delivery.state
            return self.delivery.commit()
        finally:
            self.delivery.close()

    def _resume(self, reader: Any) -> None:
        stored = self.store.load()
        state = PipelineState() if stored is None else state_from_json(stored.data)
        self.delivery.resume(state, None if stored is None else stored.version)
        self._open, self._tx, self._tables = None, _Transaction(), {}
        self._ahead = deque()
        self._jobs_this_turn = 0
        self._recent = RecentTransactions(self.settings.recent_keys)
        if stored is None:
            self.delivery.save(state)
            for tables in self.settings.initial_dumps:
                self.request_dump(tables)
        self.live = state.dumps
        self._safe_position = state.position
        self._boundary_seq = state.seq
        self.delivery.on_commit = reader.acknowledge
        reader.start(state.position)
        log.info("resumed at position %s, seq %d, %d dump(s) queued", state.position,
                 state.seq, sum(1 for d in state.dumps.dumps if d.state in dumpops.ACTIVE_STATES))

    def _loop(self, reader: Any) -> None:
        clock, settings = self.clock, self.settings
        last_commit = last_heartbeat = last_progress = clock.monotonic()
        while not self._stop.is_set():
            self._jobs_this_turn = 0
            self._apply_commands()
            if not self.election.is_leader():
                log.warning("leadership lost: stopping emission")
                raise LeadershipLost("leadership lost: stopped emitting")
            self._skip_empty_jobs()
            if self._open is None and not self._ahead:
                self._maybe_start_chunk()
            elif self._open is not None:
                self._read_ahead()
            elif self._ahead[0].future.done() and self._ahead[0].future.exception() is not None:
                self._materialize()  # raises the job's error
            self._runner.pump()
            started = clock.monotonic()
            items = reader.poll(self._poll_timeout())
            for item in items:
                self._process(item)
            now = clock.monotonic()
            self._check_window(now - started if not items else None)
            # flush on the interval, and as soon as the log is caught up (low latency when idle)
            if now - last_commit >= settings.flush_interval_s or (
                    not items and self.delivery.pending()):
                self.delivery.commit()
                last_commit = now
            if now - last_heartbeat >= settings.heartbeat_interval_s:
                self._watermarks.write(f"hb-{uuid.uuid4().hex}")
                last_heartbeat = now
            if now - last_progress >= settings.progress_interval_s:
                self._log_progress()
                last_progress = now

    def _poll_timeout(self) -> float:
        if self._dump_can_advance():
            return 0.0
        if self._runner.busy():  # a chunk is in flight: look at its results again soon
            return min(self.settings.poll_timeout_s, _PUMP_INTERVAL_S)
        return self.settings.poll_timeout_s

    def _dump_can_advance(self) -> bool:
        """A dump step that needs no log input is due (a table's first step, a dump's end):
        the loop must not wait for the log before taking it."""
        return (self._open is None and not self._ahead and self.live.active() is not None
                and self.clock.monotonic() >= self._next_chunk_at)

    def _apply_commands(self) -> None:
        while True:
            try:
                command = self.knobs.commands.get_nowait()
            except queue.Empty:
                return
            command()

    # -- log items ------------------------------------------------------------------------

    def _process(self, item: LogItem) -> None:
        if isinstance(item, Watermark):
            self._on_watermark(item)
            return
        op = item.op
        if op is Op.BEGIN:
            self._tx = _Transaction(begin=item)
        elif op is Op.COMMIT:
            if self._tx.emitted:
                self.delivery.emit(item)
            self._tx = _Transaction()
            self._safe_position = item.position
            self._boundary_seq = self.delivery.last_seq
            self.delivery.mark(item.position)
        else:
            if self._open is not None or self._ahead:
                self._apply_to_chunks(item)
            table = item.table
            if item.txid is not None and table is not None:
                key = None if op in TABLE_OPS else item.key
                self._recent.add(item.txid, table, key, bool(item.unchanged))
                if item.old_key is not None:
                    self._recent.add(item.txid, table, item.old_key)
            tx = self._tx
            if not tx.emitted and tx.begin is not None:
                self.delivery.emit(tx.begin)
                tx.emitted = True
            self.delivery.emit(item)

    def _apply_to_chunks(self, item: ChangeEvent) -> None:
        if self._open is None and self._ahead and item.table == self._ahead[0].table:
            self._materialize()  # its pending transactions may evict rows already
        if self._open is not None:
            self._open.window = on_change(self._open.window, item)

    def _on_watermark(self, mark: Watermark) -> None:
        self._skip_empty_jobs()
        if self._ahead and mark.value == self._ahead[0].low:
            if self._open is not None:  # windows are written one after the other
                raise FatalSourceError(
                    f"the high watermark of a chunk of {self._open.plan.table} was not seen "
                    "before the next chunk's low watermark")
            self._materialize()
        if self._open is None:
            return
        window, closed = on_watermark(self._open.window, mark.value)
        self._open.window = window
        if closed:
            self._close_chunk(mark.position)

    def _close_chunk(self, high_position: Position | None) -> None:
        assert self._open is not None
        chunk, self._open = self._open, None
        window, plan = chunk.window, chunk.plan
        self._next_chunk_at = self.clock.monotonic() + self.knobs.chunk_delay_s
        dump = self.live.get(plan.dump_id)
        counts = dump is not None and dump.state in dumpops.ACTIVE_STATES and not window.discarded
        if not counts:
            self._drop_jobs(plan.dump_id)  # read ahead of a chunk that does not count
        if dump is None or dump.state not in dumpops.ACTIVE_STATES:
            return
        if window.discarded:
            log.info("chunk of %s discarded by a truncate/schema change; reading it again",
                     plan.table)
            return
        rows = surviving_rows(window)
        table, dump_id, read = plan.table, plan.dump_id, Op.READ
        dump = dumpops.complete_chunk(dump, plan, window.last_key, chunk.selected, len(rows),
                                      chunk.limit)
        self.live = self.live.put(dump)
        if window.refetch:
            refetch = dumpops.keys_dump(plan.table, sorted(window.refetch, key=repr),
                                        internal=True)
            self.live = self.live.add(refetch, front=True)
        if self.knobs.chunk_delay_s == 0:
            self._prefetch()  # the next chunk is read while these rows are emitted
        self.delivery.emit_all([ChangeEvent(read, table, key, None, row, high_position, None,
                                            None, None, (), dump_id) for key, row in rows])
        # hand each chunk to the outputs at once: the output work then falls evenly on every
        # chunk and hides the next window's round trip (batches of two 1000-row chunks left
        # every other turn waiting for it: 181-214k against 219-257k rows/s)
        self.delivery.deliver()
        if window.refetch:
            self._mark_dump(refetch)
        self._mark_dump(dump)
        if dump.state is DumpState.DONE:
            log.info("dump %s done: %d rows in %d chunks", dump.id, dump.rows, dump.chunks)
            self.delivery.commit()  # a finished dump is made durable at once

    def _mark_dump(self, dump: Dump) -> None:
        """Record dump progress at the last transaction boundary: the state never pairs a
        sequence number inside a transaction with a position before it."""
        if self._tx.emitted:
            self.delivery.mark(self._safe_position, dump, seq=self._boundary_seq)
        else:
            self._boundary_seq = self.delivery.last_seq
            self.delivery.mark(self._safe_position, dump)

    def _check_window(self, idle_s: float | None) -> None:
        """Fail when the log stays idle for ``window_timeout_s`` while a window waits for its
        watermarks (a busy log, e.g. catching up a backlog, is not a reason)."""
        waiting = self._open if self._open is not None else (
            self._ahead[0] if self._ahead else None)
        if waiting is None:
            return
        waiting.idle_s = 0.0 if idle_s is None else waiting.idle_s + idle_s
        if waiting.idle_s > self.settings.window_timeout_s:
            which = "high" if isinstance(waiting, _OpenChunk) and waiting.window.low_seen \
                else "low"
            raise FatalSourceError(
                f"the {which} watermark of a chunk of {_table_of(waiting)} was not seen: the log "
                f"was idle for {self.settings.window_timeout_s:.0f}s",
                fix="check that the watermark table is captured by the log reader",
            )

    # -- chunks ---------------------------------------------------------------------------

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
        self._open = _OpenChunk(plan, window, len(chunk.rows), job.limit, job)
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
            log.info("chunk of %s discarded: a transaction invisible to its SELECT was too "
                     "large to index; reading it again", window.table)
        return guarded

    def _set_live(self, dump: Dump) -> None:
        """Change a dump's state now; its committed progress still moves only with acks."""
        self.live = self.live.put(dump)
        self.delivery.commit()
        self.delivery.update_committed(lambda state: with_dump_state(state, dump))

    # -- control commands (engine thread) -------------------------------------------------

    def _accept_dump(
        self, result: Future[str], tables: Sequence[str | TableId] | None,
        table: str | TableId | None, keys: Sequence[Sequence[Any]] | None,
        dump_id: str | None = None,
    ) -> None:
        if dump_id is not None and self.live.get(dump_id) is not None:
            result.set_result(dump_id)
            return
        try:
            dump = self._build_dump(tables, table, keys)
        except DblogError as exc:
            result.set_exception(exc)
            return
        if dump_id is not None:
            dump = replace(dump, id=dump_id)
        self.delivery.commit()
        self.live = self.live.add(dump)
        self.delivery.update_committed(lambda s: replace(s, dumps=s.dumps.add(dump)))
        log.info("dump %s queued: %s", dump.id, ", ".join(str(t.table) for t in dump.tables))
        result.set_result(dump.id)

    def _build_dump(
        self, tables: Sequence[str | TableId] | None, table: str | TableId | None,
        keys: Sequence[Sequence[Any]] | None,
    ) -> Dump:
        return dumpops.validated_dump(self._chunks, self._table_info, tables, table, keys)

    def _change_dump(self, result: Future[str], dump_id: str, state: DumpState) -> None:
        dump = self.live.get(dump_id)
        if dump is None:
            result.set_exception(DumpRequestError(f"no dump with id {dump_id!r}"))
            return
        if dump.state in (DumpState.DONE, DumpState.CANCELLED, DumpState.FAILED):
            result.set_exception(DumpRequestError(f"dump {dump_id} is already {dump.state.value}"))
            return
        if self._open is not None and self._open.plan.dump_id == dump_id:
            self._open = None  # the window's rows are never emitted; progress stays before it
        self._drop_jobs(dump_id)
        self._set_live(dumpops.set_state(dump, state))
        result.set_result(dump_id)

    def _log_progress(self) -> None:
        dump = self.live.active()
        if dump is None or dump.internal:
            return
        total = sum(t.estimated_rows for t in dump.tables)
        log.info("dump %s: %d rows in %d chunks (~%d estimated), stream seq %d", dump.id,
                 dump.rows, dump.chunks, total, self.delivery.last_seq)

