"""The engine: interleaves log events with watermark-bracketed dump chunks (SPEC section 2).

One thread runs :meth:`Engine.run`. Each loop turn it applies control commands, starts the next
chunk when no window is open (low watermark, chunk SELECT, high watermark: the only time log
forwarding pauses), then forwards what the log reader has, applying the window's drop rule, and
emits the surviving chunk rows when the high watermark arrives. Outputs are flushed and the state
committed at least every ``flush_interval_s``.

The engine is one class in three modules: the loop and log items here, the dump side (chunk
jobs, read-ahead, opening windows) in :mod:`dblog.engine.scheduler`, and control calls and
commands in :mod:`dblog.engine.control`.
"""

from __future__ import annotations

import gc
import logging
import sys
import threading
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dblog.core import dumps as dumpops
from dblog.core.acks import PipelineState
from dblog.core.dumps import Dump, DumpState
from dblog.core.model import TABLE_OPS, ChangeEvent, LogItem, Op, TableId, TableInfo, Watermark
from dblog.core.positions import Position
from dblog.core.recent import RecentTransactions
from dblog.core.window import (
    on_change,
    on_watermark,
    surviving_rows,
)
from dblog.engine.control import EngineControl
from dblog.engine.delivery import Delivery
from dblog.engine.jobs import (
    ChunkJob,
    InlineRunner,
    Runner,
)
from dblog.engine.scheduler import Knobs, OpenChunk, waiting_table
from dblog.engine.settings import EngineSettings, PhaseHooks
from dblog.errors import FatalSourceError, LeadershipLost
from dblog.runtime.clock import SingleNodeLeadership, SystemClock
from dblog.spi import (
    Clock,
    LeaderElection,
    Output,
    SourceConnector,
    StateStore,
    WakeableLogReader,
)
from dblog.state import state_from_json

__all__ = ["Engine", "EngineSettings", "PhaseHooks"]

log = logging.getLogger("dblog.engine")
_PUMP_INTERVAL_S = 0.0005


@dataclass
class _Transaction:
    begin: ChangeEvent | None = None
    emitted: bool = False


class Engine(EngineControl):
    """One capture: a source connector, its outputs and a state store, run by :meth:`run`."""

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
        self.knobs = Knobs(self.settings.chunk_size, self.settings.chunk_delay_s)
        self.live = dumpops.DumpQueue()
        self._open: OpenChunk | None = None
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
            log.info("chunk of %s discarded (a truncate or schema change in its window, or the "
                     "snapshot guard); reading it again", plan.table)
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
            which = "high" if isinstance(waiting, OpenChunk) and waiting.window.low_seen \
                else "low"
            raise FatalSourceError(
                f"the {which} watermark of a chunk of {waiting_table(waiting)} was not seen: "
                f"the log was idle for {self.settings.window_timeout_s:.0f}s",
                fix="check that the watermark table is captured by the log reader",
            )

    def _log_progress(self) -> None:
        dump = self.live.active()
        if dump is None or dump.internal:
            return
        total = sum(t.estimated_rows for t in dump.tables)
        log.info("dump %s: %d rows in %d chunks (~%d estimated), stream seq %d", dump.id,
                 dump.rows, dump.chunks, total, self.delivery.last_seq)

