"""Each engine part built and driven alone: the dump scheduler without a log reader, the
command channel without a loop, delivery without an engine, the log forwarder without a
source."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from dblog.core.acks import PipelineState
from dblog.core.dumps import Dump, DumpState
from dblog.core.model import ChangeEvent, LogItem, Op, TableId, Watermark
from dblog.core.recent import TOO_MANY_KEYS, TRUNCATED_OR_ALTERED, RecentTransactions
from dblog.core.window import TRUNCATED, guard_forwarded, open_window
from dblog.engine.commands import CommandChannel
from dblog.engine.delivery import Delivery
from dblog.engine.engine import Engine
from dblog.engine.jobs import BlockingChunkRead, InlineRunner
from dblog.engine.loop import LogForwarder, TransactionBoundary
from dblog.engine.scheduler import DumpScheduler
from dblog.engine.settings import EngineSettings, Knobs, PhaseHooks
from dblog.errors import DumpRequestError, RetryableOutputError
from dblog.testing import (
    FakeClock,
    ListOutput,
    LogOffset,
    MemoryChunkReader,
    MemoryConnector,
    MemoryDatabase,
    MemoryStateStore,
    MemoryWatermarkWriter,
)


class RecordingOutlet:
    """Stands in for delivery: keeps what the scheduler hands over."""

    def __init__(self) -> None:
        self.rows: list[ChangeEvent] = []
        self.delivered = 0
        self.commits = 0
        self.state = PipelineState()

    def emit_all(self, events: list[ChangeEvent]) -> None:
        self.rows.extend(events)

    def deliver(self) -> None:
        self.delivered += 1

    def commit(self) -> PipelineState:
        self.commits += 1
        return self.state

    def update_committed(self, change: Callable[[PipelineState], PipelineState]) -> None:
        self.state = change(self.state)


def _db(rows: int) -> tuple[MemoryDatabase, TableId]:
    db = MemoryDatabase()
    table = db.create_table("public.t", ["id", "v"], ["id"])
    db.transaction([("insert", table, {"id": i, "v": 0}) for i in range(rows)])
    return db, table


def _scheduler(db: MemoryDatabase, chunk_size: int = 4) -> tuple[DumpScheduler, RecordingOutlet,
                                                                   list[Dump]]:
    settings = EngineSettings(chunk_size=chunk_size, chunk_worker=False)
    outlet, progress = RecordingOutlet(), list[Dump]()
    read = BlockingChunkRead(MemoryChunkReader(db), MemoryWatermarkWriter(db), PhaseHooks())
    scheduler = DumpScheduler(settings, Knobs.of(settings), FakeClock(), MemoryChunkReader(db),
                              InlineRunner(read), outlet, progress.append,
                              RecentTransactions(100))
    return scheduler, outlet, progress


def _feed_log(scheduler: DumpScheduler, db: MemoryDatabase, start: int) -> int:
    """Hand the scheduler every log item from ``start`` as a forwarder would; return the end."""
    for item in db.log[start:]:
        if isinstance(item, Watermark):
            scheduler.on_watermark(item)
        elif item.table is not None and scheduler.windowing():
            scheduler.on_change(item)
    return len(db.log)


def test_the_scheduler_dumps_a_table_with_no_log_reader() -> None:
    db, table = _db(10)
    scheduler, outlet, progress = _scheduler(db)
    scheduler.accept(scheduler.validated([str(table)], None, None))
    assert outlet.state.dumps.dumps[0].state is DumpState.QUEUED  # durable at once
    seen = len(db.log)
    for _ in range(20):
        scheduler.turn()
        seen = _feed_log(scheduler, db, seen)
    assert sorted(e.key for e in outlet.rows if e.key is not None) == [(i,) for i in range(10)]
    assert {e.op for e in outlet.rows} == {Op.READ}
    assert [d.chunks for d in progress if d.tables[0].chunks] == [1, 2, 3]
    assert scheduler.live.dumps[0].state is DumpState.DONE


def test_a_change_inside_the_window_drops_the_chunk_row() -> None:
    db, table = _db(3)
    scheduler, outlet, _ = _scheduler(db)
    scheduler.accept(scheduler.validated([str(table)], None, None))
    scheduler.turn()  # starts the table: its upper key
    scheduler.turn()  # reads the chunk: L, SELECT, H written to the log
    low_at = next(i for i, item in enumerate(db.log)
                  if isinstance(item, Watermark) and item.value.startswith("L-"))
    window_log = db.log[low_at:]
    db.log[low_at:] = []
    db.transaction([("update", table, {"id": 1, "v": 9})])  # after the SELECT, before H...
    update = db.log[low_at:]
    db.log[low_at:] = [window_log[0], *update, *window_log[1:]]  # ...but logged inside L..H
    _feed_log(scheduler, db, low_at - 1)
    assert sorted(e.key for e in outlet.rows if e.key is not None) == [(0,), (2,)]


def test_the_scheduler_rejects_unknown_tables_and_states() -> None:
    db, _ = _db(1)
    scheduler, _, _ = _scheduler(db)
    with pytest.raises(DumpRequestError):
        scheduler.validated(["public.nope"], None, None)
    with pytest.raises(DumpRequestError, match="no dump"):
        scheduler.change_state("d-missing", DumpState.PAUSED)


def test_the_command_channel_runs_commands_in_order_on_the_applying_thread() -> None:
    channel = CommandChannel()
    wakes: list[int] = []
    channel.set_waker(lambda: wakes.append(1))
    ran: list[tuple[int, str]] = []

    def command(n: int) -> Callable[[], None]:
        return lambda: ran.append((n, threading.current_thread().name))

    threads = [threading.Thread(target=channel.submit, args=(command(n),)) for n in range(3)]
    for t in threads:
        t.start()
        t.join()
    assert ran == [] and len(wakes) == 3 and not channel.empty()
    assert channel.apply() == 3
    assert [n for n, _ in ran] == [0, 1, 2]
    assert {name for _, name in ran} == {threading.current_thread().name}
    assert channel.empty() and channel.apply() == 0


def _delivery(*outputs: ListOutput) -> tuple[Delivery, MemoryStateStore, FakeClock]:
    store, clock = MemoryStateStore(), FakeClock()
    delivery = Delivery(list(outputs), store, clock, epoch=1, batch_size=2)
    delivery.resume(PipelineState(), None)
    return delivery, store, clock


def test_delivery_commits_only_what_every_output_acknowledged() -> None:
    fast, slow = ListOutput("fast"), ListOutput("slow")
    delivery, store, _ = _delivery(fast, slow)

    def emit(*keys: int) -> None:
        for n in keys:
            delivery.emit(ChangeEvent(Op.INSERT, TableId("s", "t"), (n,), after={"id": n}))
        delivery.mark(LogOffset(keys[-1] * 10))

    emit(1, 2)
    slow.ack_limit = 1  # the commit point is at seq 2: the slow output has not reached it
    assert delivery.commit().seq == 0 and delivery.state.position is None
    slow.ack_limit = None
    assert delivery.commit().seq == 2 and delivery.state.position == LogOffset(20)
    emit(3, 4)
    assert delivery.commit().seq == 4
    stored = store.load()
    assert stored is not None and stored.data["seq"] == 4 and stored.data["position"] == "offset:40"


class OneFlushBehind(ListOutput):
    """Acknowledges at each flush what was written by the previous flush, like an output on
    its own thread, whose flush is answered after the engine asked for the next one."""

    def __init__(self) -> None:
        super().__init__("behind")
        self.previous = 0

    def flush(self) -> int:
        acked, self.previous = self.previous, super().flush()
        return acked


def test_commits_go_on_while_the_log_keeps_flowing_to_an_output_one_flush_behind() -> None:
    out = OneFlushBehind()
    delivery, _, _ = _delivery(out)
    committed = []
    for n in range(1, 11):  # a change and a commit point between every two commits
        delivery.emit(ChangeEvent(Op.INSERT, TableId("s", "t"), (n,), after={"id": n}))
        delivery.mark(LogOffset(n * 10))
        committed.append(delivery.commit().seq)
    assert committed == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert delivery.state.position == LogOffset(90)


def test_delivery_retries_a_transient_failure_on_its_clock_and_loses_nothing() -> None:
    out = ListOutput()
    delivery, _, clock = _delivery(out)
    out.fail_next = RetryableOutputError("broker away")
    delivery.emit_all([ChangeEvent(Op.INSERT, TableId("s", "t"), (n,)) for n in (1, 2)])
    assert [e.seq for e in out.events] == [1, 2]
    assert clock.now > 0  # the backoff slept on the injected clock


def test_the_forwarder_keeps_transactions_whole_and_skips_empty_ones() -> None:
    out = ListOutput()
    delivery, _, _ = _delivery(out)
    db, table = _db(0)
    scheduler, _, _ = _scheduler(db)
    boundary = TransactionBoundary(delivery, None, 0)
    forwarder = LogForwarder(delivery, scheduler, boundary, RecentTransactions(10))
    items: list[LogItem] = [
        ChangeEvent(Op.BEGIN, None, txid=1), Watermark("hb-1"), ChangeEvent(Op.COMMIT, None,
                                                                            txid=1),
        ChangeEvent(Op.BEGIN, None, txid=2),
        ChangeEvent(Op.INSERT, table, (1,), after={"id": 1}, txid=2),
        ChangeEvent(Op.COMMIT, None, txid=2, position=LogOffset(7)),
    ]
    for item in items:
        forwarder.process(item)
    delivery.deliver()
    assert [(e.op, e.txid) for e in out.events] == [
        (Op.BEGIN, 2), (Op.INSERT, 2), (Op.COMMIT, 2)]
    assert boundary.position == LogOffset(7) and boundary.seq == 3


def test_the_loop_waits_for_the_log_no_longer_than_the_chunk_delay() -> None:
    """A chunk delay of 10 ms must cost about 10 ms, not a whole poll timeout (0.2 s) of an
    idle log between chunks."""
    db, table = _db(12)
    settings = EngineSettings(chunk_size=4, chunk_delay_s=0.01, chunk_worker=False)
    out = ListOutput()
    connector = MemoryConnector(db)
    engine = Engine(connector, [out], MemoryStateStore(), settings, clock=FakeClock())
    read = BlockingChunkRead(MemoryChunkReader(db), MemoryWatermarkWriter(db), PhaseHooks())
    scheduler = DumpScheduler(settings, engine.knobs, engine.clock, MemoryChunkReader(db),
                              InlineRunner(read), RecordingOutlet(), lambda dump: None,
                              RecentTransactions(10))
    assert engine._poll_timeout(scheduler) == settings.poll_timeout_s  # no dump: wait
    scheduler.accept(scheduler.validated([str(table)], None, None))
    assert engine._poll_timeout(scheduler) == 0.0  # a step is due now
    scheduler.next_chunk_at = engine.clock.monotonic() + 0.01  # a chunk just closed
    assert 0 < engine._poll_timeout(scheduler) <= 0.01


def test_a_discarded_chunk_is_reported_once_with_the_reason_that_fired() -> None:
    db, table = _db(3)
    scheduler, outlet, _ = _scheduler(db)
    reported: list[tuple[TableId, str]] = []
    scheduler.discarded = lambda t, reason: reported.append((t, reason))
    scheduler.accept(scheduler.validated([str(table)], None, None))
    scheduler.turn()
    scheduler.turn()  # L, SELECT, H in the log
    low_at = next(i for i, item in enumerate(db.log)
                  if isinstance(item, Watermark) and item.value.startswith("L-"))
    window_log = db.log[low_at:]
    db.log[low_at:] = []
    db.truncate(table)
    truncate = db.log[low_at:]
    db.log[low_at:] = [window_log[0], *truncate, *window_log[1:]]
    _feed_log(scheduler, db, low_at - 1)
    assert outlet.rows == []
    assert reported == [(table, TRUNCATED)]


def test_the_snapshot_guard_says_why_a_transaction_is_unknown() -> None:
    recent = RecentTransactions(100, max_keys_per_tx=2)
    table = TableId("s", "t")
    for key in range(3):
        recent.add(7, table, (key,))
    recent.add(8, table, None)
    window = open_window(table, "L", "H", [((1,), {"id": 1})], pending_txids=frozenset({7}))
    guarded = guard_forwarded(window, recent.keys_of, None, recent.why_unknown)
    assert guarded.discarded and guarded.discard_reason is not None
    assert TOO_MANY_KEYS in guarded.discard_reason
    window = open_window(table, "L", "H", [((1,), {"id": 1})], pending_txids=frozenset({8}))
    guarded = guard_forwarded(window, recent.keys_of, None, recent.why_unknown)
    assert guarded.discard_reason is not None and TRUNCATED_OR_ALTERED in guarded.discard_reason


def test_a_flush_answered_on_the_outputs_thread_is_committed_before_the_next_commit() -> None:
    store, clock = MemoryStateStore(), FakeClock()
    delivery = Delivery([ListOutput("threaded")], store, clock, epoch=1, batch_size=2,
                        threaded=True)
    delivery.resume(PipelineState(), None)
    try:
        for n in (1, 2):
            delivery.emit(ChangeEvent(Op.INSERT, TableId("s", "t"), (n,), after={"id": n}))
        delivery.mark(LogOffset(20))
        assert delivery.commit().seq == 0  # the flush is asked for, answered later
        deadline = time.monotonic() + 10
        while delivery.sinks[0].acknowledged() < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert delivery.sinks[0].acknowledged() == 2
        stored = store.load()
        assert stored is None or stored.data["seq"] == 0  # settle has not run yet
        delivery.settle()
        stored = store.load()
        assert stored is not None and stored.data["seq"] == 2
        assert stored.data["position"] == "offset:20"
        delivery.settle()  # nothing new acknowledged: no second save
        assert store.load() == stored
    finally:
        delivery.close()
