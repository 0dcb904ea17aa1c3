"""The engine: interleaves log events with watermark-bracketed dump chunks (SPEC section 2).

One thread runs :meth:`Engine.run`. The engine is a composition of parts, each built and
tested alone:

* :class:`~dblog.engine.commands.CommandChannel`: calls from other threads (dump requests,
  pause, knobs, stop), applied at the top of each loop turn;
* :class:`~dblog.engine.scheduler.DumpScheduler`: which chunk is next, the jobs read ahead,
  the open window, and the rows emitted when it closes;
* :class:`~dblog.engine.loop.LogForwarder`: each log item to the windows and to delivery,
  transaction boundaries kept;
* :class:`~dblog.engine.delivery.Delivery`: batches to the outputs, acknowledgements, fenced
  state commits.

Each loop turn applies commands, lets the scheduler take a dump step (start a chunk: the only
time log forwarding pauses), forwards what the log reader has, and flushes and commits at
least every ``flush_interval_s`` (and as soon as the log is caught up).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from dblog.core import dumps as dumpops
from dblog.core.acks import PipelineState
from dblog.core.dumprequests import asked, initial_dumps
from dblog.core.dumps import Dump, DumpState
from dblog.core.model import TableId
from dblog.core.recent import RecentTransactions
from dblog.engine.catalog import TableCatalog
from dblog.engine.commands import CommandChannel, Rejected
from dblog.engine.delivery import Delivery
from dblog.engine.jobs import BlockingChunkRead, InlineRunner, Runner, overlapping_runner
from dblog.engine.loop import LogForwarder, TransactionBoundary
from dblog.engine.outlet import log_skipped
from dblog.engine.scheduler import DumpScheduler
from dblog.engine.settings import MAX_CHUNK_SIZE, EngineSettings, Knobs, PhaseHooks
from dblog.errors import DblogError, DumpIdConflict, DumpRequestError, LeadershipLost
from dblog.runtime.clock import SingleNodeLeadership, SystemClock
from dblog.spi import (
    Clock,
    ForgettingChunkReader,
    LeaderElection,
    LocatedPosition,
    LogReader,
    Output,
    SourceConnector,
    StateStore,
    TableAwareOutput,
    WakeableLogReader,
    WatermarkWriter,
)
from dblog.spi.metrics import Counters, MetricsSink
from dblog.state import state_from_json

__all__ = ["Engine", "EngineSettings", "PhaseHooks"]

log = logging.getLogger("dblog.engine")
_PUMP_INTERVAL_S = 0.0005


class Engine:
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
        metrics: MetricsSink | None = None,
    ) -> None:
        self.connector = connector
        self.settings = settings or EngineSettings()
        self.clock = clock or SystemClock()
        self.election = election or SingleNodeLeadership()
        self.hooks = hooks or PhaseHooks()
        self.delivery = Delivery(outputs, store, self.clock, epoch=self.election.epoch,
                                 batch_size=self.settings.batch_size,
                                 threaded=self.settings.output_threads,
                                 max_batches=self.settings.output_queue_batches,
                                 pipeline=connector.instance)
        self.delivery.is_leader = self.election.is_leader
        self.metrics = metrics or Counters()
        """Counts for the metrics endpoint (events, output calls, lag); in :meth:`status`."""
        self.delivery.metrics = self.metrics
        self.captured: tuple[str, ...] | None = None
        """The captured tables, listed at the start of each run (for status)."""
        self.store = store
        self.knobs = Knobs.of(self.settings)
        self.commands = CommandChannel()
        self.scheduler: DumpScheduler | None = None
        """The current run's dump side (None before the first run)."""
        self.running = threading.Event()
        self._stop = threading.Event()
        self._job_chunks: object = None  # the chunk jobs' own reader (chunk_worker)
        self._restarting = False
        """Between two runs: control calls are refused (a call queued before the first run
        is applied by it)."""

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> PipelineState:
        """Run until :meth:`stop` or the loss of leadership; return the committed state."""
        with contextlib.ExitStack() as opened:  # closed even when a later open fails
            opened.callback(_close, self.connector)  # what it holds itself (catalog connection)
            self.connector.prepare()
            reader = self.connector.log_reader()
            opened.callback(_close, reader)
            if isinstance(reader, WakeableLogReader):
                self.commands.set_waker(reader.wakeup)
                opened.callback(self.commands.set_waker, None)
            chunks = self.connector.chunk_reader()
            opened.callback(_close, chunks)
            marks = self.connector.watermark_writer()
            opened.callback(_close, marks)
            self._tables = TableCatalog(self.connector.chunk_reader)
            opened.callback(self._tables.close)
            runner = opened.enter_context(self._runner(opened, chunks, marks))
            opened.callback(self._run_ended)  # after running is cleared (LIFO)
            opened.callback(self.running.clear)
            return self._run(reader, chunks, runner, marks)
        raise AssertionError("unreachable")  # for mypy: ExitStack may swallow exceptions

    def _run_ended(self) -> None:
        self._restarting = True
        self.commands.drop_all()

    @contextlib.contextmanager
    def _runner(self, opened: contextlib.ExitStack, chunks: Any,
                marks: WatermarkWriter) -> Iterator[Runner]:
        """Inline, or (``chunk_worker``) overlapping on a second pair of connections."""
        if not self.settings.chunk_worker:
            runner: Runner = InlineRunner(BlockingChunkRead(chunks, marks, self.hooks))
        else:
            job_chunks = self.connector.chunk_reader()
            opened.callback(_close, job_chunks)
            self._job_chunks = job_chunks
            job_marks = self.connector.watermark_writer()
            opened.callback(_close, job_marks)
            runner = overlapping_runner(BlockingChunkRead(job_chunks, job_marks, self.hooks),
                                        self.hooks)
        switch_interval = sys.getswitchinterval()
        if self.settings.chunk_worker and self.settings.switch_interval_s is not None:
            sys.setswitchinterval(self.settings.switch_interval_s)
        try:
            yield runner
        finally:
            sys.setswitchinterval(switch_interval)
            runner.shutdown()

    def _build(self, chunks: Any, runner: Runner) -> LogForwarder:
        """This run's scheduler and forwarder, from the committed state (a fresh start saves
        an empty state and queues the initial dumps)."""
        stored = self.store.load()
        state = PipelineState() if stored is None else state_from_json(stored.data)
        for output in self.delivery.outputs:
            if isinstance(output, TableAwareOutput):
                output.set_tables(self._tables)
        self.delivery.resume(state, None if stored is None else stored.version)
        state = self.delivery.state  # an output's newer checkpoint may have replaced it
        recent = RecentTransactions(self.settings.recent_keys)
        boundary = TransactionBoundary(self.delivery, state.position, state.seq)
        scheduler = DumpScheduler(self.settings, self.knobs, self.clock, chunks, runner,
                                  self.delivery, boundary.record_progress, recent)
        scheduler.live = state.dumps
        if isinstance(self._job_chunks, ForgettingChunkReader):
            scheduler.forgetting.append(self._job_chunks)
        scheduler.discarded = self.metrics.chunk_discarded
        self.scheduler = scheduler
        self.captured = tuple(str(t) for t in chunks.list_tables())
        if stored is None and state.seq == 0:
            initial = initial_dumps(  # checked before the first state is saved
                lambda tables: scheduler.validated(tables, None, None),
                self.settings.initial_dumps, self.settings.initial_dumps_skip_unavailable,
                log_skipped)
            for dump in initial:
                state = replace(state, dumps=state.dumps.add(dump))
            scheduler.live = state.dumps
            # one write: a failure after it cannot leave a stored state without the initial
            # dumps (every later run finds a stored state and queues none)
            self.delivery.save(state)
            for dump in initial:
                log.info("dump %s queued: %s", dump.id,
                         ", ".join(str(t.table) for t in dump.tables))
        log.info("resumed at position %s, seq %d, %d dump(s) queued", state.position,
                 state.seq, sum(1 for d in state.dumps.dumps if d.state in dumpops.ACTIVE_STATES))
        forwarder = LogForwarder(self.delivery, scheduler, boundary, recent)
        forwarder.schema_changed = self._tables.invalidate
        return forwarder

    def _run(self, reader: LogReader, chunks: Any, runner: Runner,
             marks: WatermarkWriter) -> PipelineState:
        try:
            forwarder = self._build(chunks, runner)
            self.delivery.on_commit = reader.acknowledge
            reader.start(self.delivery.state.position)
            if self.settings.tune_gc:
                # the stream allocates many short-lived, acyclic objects; move what start-up
                # built out of the collector's way and collect young objects less often
                gc.freeze()
                gc.set_threshold(200_000, 50, 50)
            self._restarting = False
            self.running.set()
            try:
                self._loop(reader, forwarder, marks)
            except LeadershipLost as exc:  # nothing more may reach outputs or the state
                if self.election.is_leader():
                    # an output refused this epoch while the election still holds (with no
                    # election at all, another instance writes there): an error, not a quiet
                    # end of the run; under ZooKeeper the term ends and the instance campaigns
                    raise
                log.warning("%s; committed state stays at seq %d", exc, self.delivery.state.seq)
                return self.delivery.state
            return self.delivery.commit(wait=True)
        finally:
            self.delivery.close()

    def _loop(self, reader: LogReader, forwarder: LogForwarder, marks: WatermarkWriter) -> None:
        clock, settings, scheduler = self.clock, self.settings, forwarder.windows
        assert isinstance(scheduler, DumpScheduler)
        process = forwarder.process
        last_commit = last_heartbeat = last_progress = clock.monotonic()
        while not self._stop.is_set():
            self.commands.apply()
            if not self.election.is_leader():
                log.warning("leadership lost: stopping emission")
                raise LeadershipLost("leadership lost: stopped emitting")
            scheduler.turn()
            started = clock.monotonic()
            items = reader.poll(self._poll_timeout(scheduler))
            if not items:  # at the head of the log: nothing to lag behind
                self.metrics.caught_up()
            for item in items:
                process(item)
            now = clock.monotonic()
            scheduler.check_window(now - started if not items else None)
            # flush on the interval, and as soon as the log is caught up (low latency when idle)
            if now - last_commit >= settings.flush_interval_s or (
                    not items and self.delivery.pending()):
                self.delivery.commit()
                last_commit = now
            else:
                self.delivery.settle()  # a flush answered since: commit it now
            if now - last_heartbeat >= settings.heartbeat_interval_s:
                marks.write(f"hb-{uuid.uuid4().hex}")
                last_heartbeat = now
            if now - last_progress >= settings.progress_interval_s:
                scheduler.log_progress(self.delivery.last_seq)
                last_progress = now

    def _poll_timeout(self, scheduler: DumpScheduler) -> float:
        due_in = scheduler.due_in()  # 0 when a step is due now; the chunk delay otherwise
        if due_in == 0:
            return 0.0
        if scheduler.busy():  # a chunk is in flight: look at its results again soon
            return min(self.settings.poll_timeout_s, _PUMP_INTERVAL_S)
        if due_in is not None:
            return min(self.settings.poll_timeout_s, due_in)
        return self.settings.poll_timeout_s

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
        return self._on_engine_thread(
            lambda scheduler: _accept(scheduler, dump_id, asked(tables, table, keys),
                                      lambda: scheduler.validated(tables, table, keys)))

    def request_range_dump(
        self, table: str | TableId | None, key_from: Sequence[Any] | None,
        key_to: Sequence[Any] | None, *, dump_id: str | None = None,
    ) -> Future[str]:
        """Queue a dump of the keys of ``table`` from ``key_from`` to ``key_to``, both
        included (None: that end is open); like :meth:`request_dump` otherwise."""
        return self._on_engine_thread(
            lambda scheduler: _accept(
                scheduler, dump_id, asked(table=table, ranged=True, key_from=key_from,
                                          key_to=key_to),
                lambda: scheduler.validated_range(table, key_from, key_to)))

    def set_dump_state(self, dump_id: str, state: DumpState) -> Future[str]:
        """Pause (PAUSED), resume (QUEUED) or cancel (CANCELLED) a dump, between chunks."""
        def change(scheduler: DumpScheduler) -> str:
            try:
                scheduler.change_state(dump_id, state)
            except DumpRequestError as exc:
                raise Rejected(exc) from exc
            return dump_id

        return self._on_engine_thread(change)

    def set_knobs(self, chunk_size: int | None = None, chunk_delay_s: float | None = None) -> None:
        """Change the knobs (any thread); a value of the wrong type or range is refused with a
        DumpRequestError and changes nothing (``True`` is no chunk size, NaN no delay)."""
        if chunk_size is not None and (type(chunk_size) is not int
                                       or not 1 <= chunk_size <= MAX_CHUNK_SIZE):
            raise DumpRequestError(f"chunk_size must be a whole number from 1 to "
                                   f"{MAX_CHUNK_SIZE}, got {chunk_size!r}")
        if chunk_delay_s is not None and (isinstance(chunk_delay_s, bool) or not isinstance(
                chunk_delay_s, (int, float)) or not chunk_delay_s <= 3600):  # NaN too
            raise DumpRequestError(f"chunk_delay_s must be a number of seconds up to 3600, "
                                   f"got {chunk_delay_s!r}")
        if chunk_size is not None:
            self.knobs.chunk_size = chunk_size
        if chunk_delay_s is not None:
            self.knobs.chunk_delay_s = max(0.0, float(chunk_delay_s))

    def stop(self) -> None:
        self._stop.set()
        self.commands.wake()

    def status(self) -> dict[str, Any]:
        state, scheduler = self.delivery.state, self.scheduler
        live = state.dumps if scheduler is None else scheduler.live
        return {
            "running": self.running.is_set(),
            "committed_position": None if state.position is None else str(state.position),
            "committed_location": _location(state.position),
            "committed_seq": state.seq,
            "emitted_seq": self.delivery.last_seq,
            "dumps": [dumpops.dump_to_json(d) for d in live.dumps if not d.internal],
            "tables": None if self.captured is None else list(self.captured),
            "knobs": {"chunk_size": self.knobs.chunk_size,
                      "chunk_delay_s": self.knobs.chunk_delay_s},
            "queues": {"pending_commits": self.delivery.pending_points(),
                       "chunks_ahead": 0 if scheduler is None else len(scheduler.ahead)},
            "metrics": self.metrics.snapshot(),
        }

    def _on_engine_thread(self, command: Callable[[DumpScheduler], str]) -> Future[str]:
        """Run ``command`` on the engine thread with the current run's scheduler
        (:meth:`CommandChannel.call`); refused at once between two runs."""
        def call() -> str:
            assert self.scheduler is not None  # commands are applied inside a run only
            return command(self.scheduler)

        return self.commands.call(call, refuse=self._restarting)


def _accept(scheduler: DumpScheduler, dump_id: str | None, asked: str,
            validate: Callable[[], Dump]) -> str:
    """Validate a request and queue its dump (engine thread). Under a ``dump_id`` that names
    a dump already, the same request (``asked``, as given) gets that dump without a second
    check (a client's retry, also after its table was dropped); another one is refused
    (:class:`DumpIdConflict`). A dump stored before requests were kept takes any."""
    existing = None if dump_id is None else scheduler.live.get(dump_id)
    if existing is not None:
        if existing.asked not in (None, asked):
            raise Rejected(DumpIdConflict(existing.id, existing.asked or ""))
        return existing.id
    try:
        dump = validate()
    except DblogError as exc:  # the request fails alone; the engine goes on
        raise Rejected(exc) from exc
    except Exception as exc:  # only dblog's own errors leave the engine
        log.error("dump request failed its checks", exc_info=exc)
        raise Rejected(DumpRequestError(
            f"the request could not be checked: {type(exc).__name__}: {exc}")) from exc
    if dump_id is not None:
        dump = replace(dump, id=dump_id, asked=asked)
    scheduler.accept(dump)
    return dump.id


def _location(position: object) -> dict[str, Any] | None:
    """Where the committed position lies in the source's log files, when it knows."""
    location = position.log_location if isinstance(position, LocatedPosition) else None
    return None if location is None else {"file": location[0], "offset": location[1]}


def _close(closeable: Any) -> None:
    try:
        closeable.close()
    except Exception:  # one failed close must not leak the others
        log.exception("closing %r failed", closeable)
