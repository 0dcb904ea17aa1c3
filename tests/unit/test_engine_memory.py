"""The engine over the in-memory doubles: restarts, acknowledgements, output failures, dump
control, bad requests, key-list dumps and TRUNCATE inside a window.

Most tests drive ``Engine.run`` deterministically from the test thread (see engine_script).
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import orjson
import pytest

from dblog.connectors.postgres.positions import Lsn
from dblog.core.dumps import ChunkPlan, Dump, DumpState
from dblog.core.model import ChangeEvent, Op, TableId, Watermark
from dblog.engine import Engine, EngineSettings, PhaseHooks
from dblog.engine.jobs import READ_AHEAD_DEPTH
from dblog.errors import (
    DumpRequestError,
    FatalOutputError,
    FatalSourceError,
    RetryableOutputError,
)
from dblog.outputs.jsonl import JsonlOutput
from dblog.spi import StateStore
from dblog.state import FileStateStore, state_from_json
from dblog.testing import (
    ListOutput,
    MemoryConnector,
    MemoryDatabase,
    MemoryStateStore,
    replay,
)
from tests.unit.engine_script import (
    Run,
    VersionBook,
    assert_log_order,
    assert_no_time_travel,
    assert_replay_equals_source,
    assert_seq_contiguous,
    fast_settings,
    log_positions_expected,
    source_rows,
)


def make_db(rows: int = 50, name: str = "public.t") -> tuple[MemoryDatabase, TableId]:
    """A table whose rows exist before the log starts: only a dump delivers them."""
    db = MemoryDatabase()
    table = db.create_table(name, ["id", "v"], ["id"])
    for k in range(rows):
        db.tables[table].rows[(k,)] = {"id": k, "v": 0}
    return db, table


def reads(events: Sequence[ChangeEvent], table: TableId | None = None) -> list[int]:
    return [e.key[0] for e in events  # type: ignore[index]
            if e.op is Op.READ and (table is None or e.table == table)]


def low_watermarks(db: MemoryDatabase) -> int:
    return sum(1 for i in db.log if isinstance(i, Watermark) and i.value.startswith("L-"))


def committed(store: StateStore) -> Any:
    stored = store.load()
    assert stored is not None
    return state_from_json(stored.data)


def dump_progress(run: Run, dump_id: str) -> Dump:
    assert run.engine.scheduler is not None
    dump = run.engine.scheduler.live.get(dump_id)
    assert dump is not None
    return dump


@pytest.mark.parametrize("output_threads", [False, True], ids=["inline", "threaded"])
def test_dump_with_concurrent_writes_replays_the_source_exactly(output_threads: bool) -> None:
    db, t = make_db(80)
    rng = random.Random(7)
    book = VersionBook()
    out, store = ListOutput(), MemoryStateStore()

    def on_poll(run: Run) -> None:
        if run.polls < 150:
            n = book.next()
            k = rng.randrange(100)
            op = rng.choice(["upsert", "update", "delete"])
            book.transaction(db, [(op, t, {"id": k, "v": n})], n)

    run = Run(db, [out], store, settings=fast_settings(7, output_threads=output_threads),
              on_poll=on_poll)
    future = run.engine.request_dump(["public.t"])
    run.go()
    dump_id = future.result(0)
    assert_replay_equals_source(out.events, db)
    assert_log_order(out.events, db)
    assert_no_time_travel(out.events, book)
    assert_seq_contiguous(out.events)
    assert all(e.dump_id == dump_id for e in out.events if e.op is Op.READ)
    assert all(e.dump_id is None for e in out.events if e.op is not Op.READ)
    state = committed(store)
    assert state.seq == out.events[-1].seq
    assert state.dumps.get(dump_id).state is DumpState.DONE
    assert run.engine.status()["dumps"][0]["state"] == "done"


def test_read_events_carry_the_high_watermark_position() -> None:
    db, t = make_db(3)
    out = ListOutput()
    run = Run(db, [out], MemoryStateStore(), settings=fast_settings(10))
    run.engine.request_dump([t])
    run.go()
    highs = [i.position for i in db.log if isinstance(i, Watermark) and i.value.startswith("H-")]
    assert len(highs) == 1
    assert [e.position for e in out.events if e.op is Op.READ] == [highs[0]] * 3
    assert reads(out.events) == [0, 1, 2]


def test_restart_resumes_the_dump_at_the_last_completed_chunk() -> None:
    db, t = make_db(100)
    out, store = ListOutput(), MemoryStateStore()
    first = Run(db, [out], store, settings=fast_settings(10), stop_when_idle=False)
    future = first.engine.request_dump([t])
    first.on_poll = lambda run: future.done() and dump_progress(run, future.result()).chunks >= 4
    first.go()
    dump_id = future.result(0)
    state = committed(store)
    dump = state.dumps.get(dump_id)
    assert dump is not None and dump.state is DumpState.RUNNING
    done_chunks, last_key = dump.tables[0].chunks, dump.tables[0].last_key
    assert 4 <= done_chunks < 10
    assert last_key == (done_chunks * 10 - 1,)
    assert reads(out.events) == list(range(done_chunks * 10))
    windows_before = low_watermarks(db)

    second = Run(db, [out], store, settings=fast_settings(10))
    second.go()
    second_reads = reads(out.events)[done_chunks * 10:]
    assert second_reads[0] == last_key[0] + 1, "the dump restarted instead of resuming"
    assert Counter(reads(out.events)) == Counter(range(100))  # every key read once
    final = committed(store).dumps.get(dump_id)
    assert final.state is DumpState.DONE
    assert final.tables[0].chunks == 10
    assert final.rows == 100
    # the second run opened only the windows of the remaining chunks
    assert low_watermarks(db) - windows_before == 10 - done_chunks
    assert_replay_equals_source(out.events, db)
    assert_seq_contiguous(out.events)


def test_restart_rereads_chunks_that_were_emitted_but_never_acknowledged() -> None:
    db, t = make_db(60)
    out, store = ListOutput(), MemoryStateStore()

    def on_poll(run: Run) -> bool:
        if not future.done():
            return False
        dump = dump_progress(run, future.result())
        if dump.chunks >= 2 and out.ack_limit is None:
            out.ack_limit = run.engine.delivery.last_seq  # acknowledge chunks 1-2 only
        return dump.chunks >= 5

    first = Run(db, [out], store, settings=fast_settings(10), on_poll=on_poll,
                stop_when_idle=False)
    future = first.engine.request_dump([t])
    first.go()
    limit = out.ack_limit
    assert limit is not None
    state = committed(store)
    assert state.seq <= limit
    assert state.dumps.get(future.result()).tables[0].chunks == 2
    assert reads(out.events)[:50] == list(range(50))  # emitted, but only 20 acknowledged

    out.ack_limit = None
    second = Run(db, [out], store, settings=fast_settings(10))
    second.go()
    assert reads(out.events) == list(range(60)), "unacknowledged chunks were not read again"
    assert_replay_equals_source(out.events, db)
    assert_seq_contiguous(out.events)


def test_restart_under_writes_keeps_i1_to_i3() -> None:
    db, t = make_db(60)
    out, store = ListOutput(), MemoryStateStore()
    book, rng = VersionBook(), random.Random(3)

    def writer(stop_at: int | None) -> Any:
        def on_poll(run: Run) -> bool:
            if len(book.by_txid) < 120:
                n = book.next()
                k = rng.randrange(70)
                book.transaction(db, [(rng.choice(["upsert", "delete"]), t, {"id": k, "v": n}),
                                      ("upsert", t, {"id": (k + 1) % 70, "v": n})], n)
            return stop_at is not None and run.polls >= stop_at
        return on_poll

    for stop_at in (10, 25, None):
        run = Run(db, [out], store, settings=fast_settings(4, flush_interval_s=0.02),
                  on_poll=writer(stop_at), stop_when_idle=stop_at is None)
        if stop_at == 10:
            run.engine.request_dump([t])
        run.go()
    assert_replay_equals_source(out.events, db)
    assert_log_order(out.events, db)
    assert_no_time_travel(out.events, book)
    assert_seq_contiguous(out.events)


def test_restart_while_a_transaction_is_half_forwarded_keeps_transactions_whole() -> None:
    """A dump's table start is recorded between two polls; when a transaction spans those
    polls, the committed state must not combine a sequence number that includes half of the
    transaction with a position before it (a restart would then repeat the transaction
    inside itself: BEGIN e1..e4 BEGIN e1..e10 COMMIT)."""
    db, t = make_db(5)
    db.transaction([("upsert", t, {"id": 100 + i, "v": 1}) for i in range(10)])  # 12 items
    out, store = ListOutput(), MemoryStateStore()

    def on_poll(run: Run) -> bool:
        if run.polls == 1:
            run.engine.request_dump([t])  # applied after poll 1 returned BEGIN + 4 events
        return run.polls == 2

    first = Run(db, [out], store, settings=fast_settings(10, flush_interval_s=0.0),
                on_poll=on_poll, max_batch=5, stop_when_idle=False)
    first.go()
    Run(db, [out], store, settings=fast_settings(10), max_batch=5).go()
    assert_replay_equals_source(out.events, db)
    assert_log_order(out.events, db)


def test_ack_limit_keeps_the_committed_state_behind() -> None:
    db, t = make_db(30)
    slow, fast = ListOutput("slow"), ListOutput("fast")
    slow.ack_limit = 12
    store = MemoryStateStore()
    book = VersionBook()

    def on_poll(run: Run) -> None:
        if run.polls <= 20:
            n = book.next()
            book.transaction(db, [("upsert", t, {"id": run.polls, "v": n})], n)

    run = Run(db, [slow, fast], store, settings=fast_settings(5), on_poll=on_poll)
    run.engine.request_dump([t])
    run.go()
    assert len(fast.events) > 40
    assert [e.seq for e in fast.events] == [e.seq for e in slow.events]
    state = committed(store)
    assert 0 < state.seq <= 12
    # nothing at or before the committed position is beyond what every output acknowledged
    unacked = [e for e in slow.events if e.seq > 12 and e.position is not None
               and e.op is not Op.READ]
    assert unacked and all(e.position > state.position for e in unacked)
    assert run.acknowledged and all(p <= state.position for p in run.acknowledged)
    assert run.engine.status()["committed_seq"] == state.seq
    assert run.engine.status()["emitted_seq"] == fast.events[-1].seq

    # the dump is done in the stream, but its committed progress lags behind too
    dump = state.dumps.dumps[0]
    assert dump.state is not DumpState.DONE

    slow.ack_limit = None
    Run(db, [slow, fast], store, settings=fast_settings(5)).go()
    state = committed(store)
    assert state.seq == slow.events[-1].seq
    assert state.dumps.dumps[0].state is DumpState.DONE
    assert_replay_equals_source(slow.events, db)
    assert_log_order(slow.events, db)


def test_retryable_output_failure_is_retried_and_nothing_is_lost() -> None:
    db, t = make_db(40)
    out, store = ListOutput(), MemoryStateStore()
    book = VersionBook()
    failures = {"set": 0}

    def on_poll(run: Run) -> None:
        if run.polls <= 30:
            n = book.next()
            book.transaction(db, [("upsert", t, {"id": run.polls * 3, "v": n})], n)
        if run.polls in (3, 9, 17) and out.fail_next is None:
            out.fail_next = RetryableOutputError("broker unavailable")
            failures["set"] += 1

    run = Run(db, [out], store, settings=fast_settings(6, batch_size=4), on_poll=on_poll)
    run.engine.request_dump([t])
    start = run.clock.now
    run.go()
    assert failures["set"] == 3
    assert out.fail_next is None, "the injected failure was never hit"
    assert run.clock.now - start >= run.polls * run.tick + 3 * 0.1 - 1e-9  # backoff slept
    assert_seq_contiguous(out.events)
    assert_replay_equals_source(out.events, db)
    assert_log_order(out.events, db)
    assert committed(store).seq == out.events[-1].seq


def test_fatal_output_failure_propagates_and_commits_nothing_unwritten() -> None:
    db, t = make_db(40)
    out, store = ListOutput(), MemoryStateStore()

    def on_poll(run: Run) -> None:
        if run.polls == 6:
            out.fail_next = FatalOutputError("disk full")

    run = Run(db, [out], store, settings=fast_settings(5, batch_size=3), on_poll=on_poll)
    run.engine.request_dump([t])
    with pytest.raises(FatalOutputError, match="disk full"):
        run.go()
    assert not run.engine.running.is_set()
    written = out.events[-1].seq if out.events else 0
    assert committed(store).seq <= written


class AlwaysFailing(ListOutput):
    def __init__(self) -> None:
        super().__init__("flaky")
        self.attempts = 0

    def write(self, events: Sequence[ChangeEvent]) -> None:
        self.attempts += 1
        raise RetryableOutputError("still down")


def test_retryable_output_failure_gives_up_after_the_retry_budget() -> None:
    db, t = make_db(5)
    out = AlwaysFailing()
    run = Run(db, [out], MemoryStateStore(), settings=fast_settings(5, batch_size=1))
    run.engine.request_dump([t])
    with pytest.raises(RetryableOutputError):
        run.go()
    assert out.attempts == run.engine.delivery.max_retries + 1


@pytest.mark.parametrize(("worker", "windows"), [(False, False), (True, False), (True, True)],
                         ids=["inline", "worker", "window"])
def test_pause_holds_the_dump_and_resume_continues_it(worker: bool, windows: bool) -> None:
    db, t = make_db(50)
    out, store = ListOutput(), MemoryStateStore()
    state: dict[str, Any] = {"phase": "dumping", "reads_at_pause": None}
    futures: dict[str, Future[str]] = {}

    def on_poll(run: Run) -> bool:
        engine = run.engine
        dump_id = futures["dump"].result() if futures["dump"].done() else None
        if dump_id is None:
            return False
        if state["phase"] == "dumping" and dump_progress(run, dump_id).chunks >= 2:
            futures["pause"] = engine.set_dump_state(dump_id, DumpState.PAUSED)
            state["phase"] = "pausing"
        elif state["phase"] == "pausing" and futures["pause"].done():
            state["phase"], state["pause_poll"] = "paused", run.polls
            state["reads_at_pause"] = len(reads(out.events))
            engine.delivery.commit()
        elif state["phase"] == "paused":
            assert len(reads(out.events)) == state["reads_at_pause"], "read while paused"
            if run.polls - state["pause_poll"] == 30:
                assert engine.status()["dumps"][0]["state"] == "paused"
                assert committed(store).dumps.get(dump_id).state is DumpState.PAUSED
                state["committed_chunks"] = committed(store).dumps.get(dump_id).chunks
                futures["resume"] = engine.set_dump_state(dump_id, DumpState.QUEUED)
                state["phase"] = "resumed"
                run.stop_when_idle = True
        return False

    run = Run(db, [out], store, settings=fast_settings(5, chunk_worker=worker),
              on_poll=on_poll, stop_when_idle=False, windows=windows)
    futures["dump"] = run.engine.request_dump([t])
    run.go()
    dump_id = futures["dump"].result(0)
    assert futures["pause"].result(0) == dump_id
    assert futures["resume"].result(0) == dump_id
    assert state["phase"] == "resumed"
    # the pause is applied at the start of a loop turn: the chunks read ahead of the open
    # window (up to READ_AHEAD_DEPTH) may still close in the turn it was requested in
    assert 2 <= state["reads_at_pause"] // 5 <= 3 + READ_AHEAD_DEPTH
    assert reads(out.events) == list(range(50))  # each key once, in order, despite the pause
    final = committed(store).dumps.get(dump_id)
    assert final.state is DumpState.DONE and final.rows == 50
    assert_replay_equals_source(out.events, db)


def test_pause_survives_a_restart() -> None:
    db, t = make_db(30)
    out, store = ListOutput(), MemoryStateStore()
    futures: dict[str, Future[str]] = {}

    def on_poll(run: Run) -> bool:
        dump = futures["dump"]
        if "pause" not in futures and dump.done() and dump_progress(run, dump.result()).chunks:
            futures["pause"] = run.engine.set_dump_state(dump.result(), DumpState.PAUSED)
        return "pause" in futures and futures["pause"].done()

    first = Run(db, [out], store, settings=fast_settings(5), on_poll=on_poll,
                stop_when_idle=False)
    futures["dump"] = first.engine.request_dump([t])
    first.go()
    dump_id = futures["dump"].result(0)
    reads_before = reads(out.events)
    second = Run(db, [out], store, settings=fast_settings(5))
    second.go()  # idle at once: the only dump is paused
    assert reads(out.events) == reads_before
    assert committed(store).dumps.get(dump_id).state is DumpState.PAUSED
    assert second.engine.status()["dumps"][0]["state"] == "paused"


def test_cancel_stops_the_dump_for_good() -> None:
    db, t = make_db(50)
    out, store = ListOutput(), MemoryStateStore()
    futures: dict[str, Future[str]] = {}

    def on_poll(run: Run) -> None:
        dump = futures["dump"]
        if "cancel" not in futures and dump.done() and dump_progress(run, dump.result()).chunks > 2:
            futures["cancel"] = run.engine.set_dump_state(dump.result(), DumpState.CANCELLED)

    run = Run(db, [out], store, settings=fast_settings(5), on_poll=on_poll)
    futures["dump"] = run.engine.request_dump([t])
    run.go()
    dump_id = futures["dump"].result(0)
    assert futures["cancel"].result(0) == dump_id
    got = reads(out.events)
    assert 15 <= len(got) < 50
    assert got == list(range(len(got)))
    assert committed(store).dumps.get(dump_id).state is DumpState.CANCELLED
    assert run.engine.status()["dumps"][0]["state"] == "cancelled"

    # cancelling again, or resuming a cancelled dump, is refused; a restart does not revive it
    again = Run(db, [out], store, settings=fast_settings(5), stop_when_idle=False,
                on_poll=lambda r: r.polls >= 3)
    f_cancel = again.engine.set_dump_state(dump_id, DumpState.CANCELLED)
    f_resume = again.engine.set_dump_state(dump_id, DumpState.QUEUED)
    again.go()
    with pytest.raises(DumpRequestError, match="cancelled"):
        f_cancel.result(0)
    with pytest.raises(DumpRequestError):
        f_resume.result(0)
    assert reads(out.events) == got


def test_dump_control_of_an_unknown_dump_is_refused() -> None:
    db, _ = make_db(1)
    run = Run(db, [ListOutput()], MemoryStateStore())
    future = run.engine.set_dump_state("nope", DumpState.PAUSED)
    run.go()
    with pytest.raises(DumpRequestError, match="nope"):
        future.result(0)


def test_dump_request_for_an_unknown_table_raises_from_the_future() -> None:
    db, _ = make_db(10)
    out, store = ListOutput(), MemoryStateStore()
    run = Run(db, [out], store)
    bad = run.engine.request_dump(["public.missing"])
    bad_mixed = run.engine.request_dump(["public.t", "public.missing"])
    bad_keys = run.engine.request_dump(table="public.missing", keys=[[1]])
    good = run.engine.request_dump(["public.t"])
    run.go()
    for future in (bad, bad_mixed, bad_keys):
        with pytest.raises(DumpRequestError, match="missing"):
            future.result(0)
    # nothing else is affected: the valid request ran to completion
    assert reads(out.events) == list(range(10))
    state = committed(store)
    assert [d.id for d in state.dumps.dumps] == [good.result(0)]


def test_malformed_key_dump_requests_are_refused() -> None:
    db = MemoryDatabase()
    db.create_table("public.pair", ["a", "b", "v"], ["a", "b"])
    run = Run(db, [ListOutput()], MemoryStateStore())
    wrong_arity = run.engine.request_dump(table="public.pair", keys=[[1]])
    no_table = run.engine.request_dump(keys=[[1, 2]])
    run.go()
    with pytest.raises(DumpRequestError):
        wrong_arity.result(0)
    with pytest.raises(DumpRequestError, match="table"):
        no_table.result(0)
    assert run.store.load().data["dumps"] == []  # type: ignore[union-attr]


def test_key_list_dump_reads_only_the_listed_keys() -> None:
    db, _ = make_db(30)
    out, store = ListOutput(), MemoryStateStore()
    run = Run(db, [out], store, settings=fast_settings(2))
    future = run.engine.request_dump(table="public.t", keys=[[5], [17], [3], [99], [29]])
    run.go()
    dump_id = future.result(0)
    read_events = [e for e in out.events if e.op is Op.READ]
    assert sorted(e.key or () for e in read_events) == [(3,), (5,), (17,), (29,)]
    assert all(e.dump_id == dump_id and e.after == {"id": e.key[0], "v": 0}  # type: ignore[index]
               for e in read_events)
    dump = committed(store).dumps.get(dump_id)
    assert dump.state is DumpState.DONE
    assert dump.keys == ((5,), (17,), (3,), (99,), (29,))
    assert dump.chunks == 3 and dump.rows == 4


def test_key_list_dump_applies_the_drop_rule() -> None:
    db, t = make_db(10)
    out = ListOutput()
    book = VersionBook()

    def before_high(plan: ChunkPlan) -> None:
        n = book.next()
        book.transaction(db, [("update", t, {"id": 4, "v": n})], n)

    run = Run(db, [out], MemoryStateStore(), hooks=PhaseHooks(before_high=before_high))
    run.engine.request_dump(table=t, keys=[[4], [6]])
    run.go()
    assert reads(out.events) == [6]
    assert_replay_equals_source([e for e in out.events if e.key in ((4,), (6,))],
                                _only(db, t, {4, 6}))
    assert_no_time_travel(out.events, book)


def _only(db: MemoryDatabase, table: TableId, keys: set[int]) -> MemoryDatabase:
    copy = MemoryDatabase()
    copy.create_table(str(table), ["id", "v"], ["id"])
    copy.tables[table].rows = {k: r for k, r in db.tables[table].rows.items() if k[0] in keys}
    return copy


def test_dml_right_after_low_and_before_high_drops_the_chunk_rows() -> None:
    db, t = make_db(20)
    out = ListOutput()
    book = VersionBook()
    calls = Counter[str]()

    def after_low(plan: ChunkPlan) -> None:
        calls["low"] += 1
        if calls["low"] == 1:  # visible to the SELECT, and in the log after L
            n = book.next()
            book.transaction(db, [("update", t, {"id": 2, "v": n}),
                                  ("delete", t, {"id": 3})], n)

    def before_high(plan: ChunkPlan) -> None:
        calls["high"] += 1
        if calls["high"] == 1:  # invisible to the SELECT, in the log before H
            n = book.next()
            book.transaction(db, [("update", t, {"id": 5, "v": n}),
                                  ("update", t, {"id": 30, "v": n, "__old_key__": (7,)})], n)

    run = Run(db, [out], MemoryStateStore(), settings=fast_settings(10),
              hooks=PhaseHooks(after_low=after_low, before_high=before_high))
    run.engine.request_dump([t])
    run.go()
    first_chunk = [e.key[0] for e in out.events if e.op is Op.READ][:6]  # type: ignore[index]
    assert first_chunk == [0, 1, 4, 6, 8, 9]  # 2, 3, 5 and 7 were dropped
    assert reads(out.events)[6:] == list(range(10, 20))
    assert_replay_equals_source(out.events, db)
    assert_no_time_travel(out.events, book)
    assert_log_order(out.events, db)


def truncate_before_high(db: MemoryDatabase, table: TableId, book: VersionBook, *,
                         chunk: int, rewrite: Sequence[int]) -> Callable[[ChunkPlan], None]:
    """A before-H hook: in the ``chunk``-th chunk, truncate the table and write ``rewrite``."""
    calls = Counter[str]()

    def before_high(plan: ChunkPlan) -> None:
        calls["high"] += 1
        if calls["high"] == chunk:
            book.truncate(db, table)
            n = book.next()
            book.transaction(db, [("upsert", table, {"id": k, "v": n}) for k in rewrite], n)

    return before_high


def test_truncate_inside_a_window_discards_the_chunk_and_reads_it_again() -> None:
    db, t = make_db(10)
    out = ListOutput()
    book = VersionBook()
    # second chunk: the SELECT saw rows 5..9, then the truncate
    before_high = truncate_before_high(db, t, book, chunk=2, rewrite=(6, 8, 11))
    run = Run(db, [out], MemoryStateStore(), settings=fast_settings(5),
              hooks=PhaseHooks(before_high=before_high))
    future = run.engine.request_dump([t])
    run.go()
    truncate_at = next(i for i, e in enumerate(out.events) if e.op is Op.TRUNCATE)
    before, after = out.events[:truncate_at], out.events[truncate_at:]
    assert reads(before) == [0, 1, 2, 3, 4]
    # the discarded chunk's stale rows (v=0) never follow the truncate; the chunk is read
    # again and finds the rows written after it
    stale = [e for e in after if e.op is Op.READ and e.after["v"] == 0]  # type: ignore[index]
    assert stale == []
    assert reads(after) == [6, 8]  # 11 is above the dump's upper bound: it came by the log
    assert low_watermarks(db) == 3  # chunk 1, chunk 2 (discarded), chunk 2 again
    dump = committed(run.store).dumps.get(future.result(0))
    assert dump.state is DumpState.DONE
    assert_replay_equals_source(out.events, db)
    assert_no_time_travel(out.events, book)


@pytest.mark.parametrize("worker", [False, True], ids=["inline", "worker"])
def test_a_chunk_read_ahead_of_a_discarded_chunk_is_dropped(worker: bool) -> None:
    """Chunk 3 is read ahead (after key 9) while chunk 2's window is open; a truncate discards
    chunk 2, so chunk 3 must not count: chunk 2's range is read again from key 4."""
    db, t = make_db(15)
    out = ListOutput()
    book = VersionBook()
    # chunk 2 selected rows 5..9
    before_high = truncate_before_high(db, t, book, chunk=2, rewrite=(6, 8, 11))
    run = Run(db, [out], MemoryStateStore(), settings=fast_settings(5, chunk_worker=worker),
              hooks=PhaseHooks(before_high=before_high))
    future = run.engine.request_dump([t])
    run.go()
    truncate_at = next(i for i, e in enumerate(out.events) if e.op is Op.TRUNCATE)
    before, after = out.events[:truncate_at], out.events[truncate_at:]
    assert reads(before) == [0, 1, 2, 3, 4]
    assert reads(after) == [6, 8, 11]  # chunk 2 again, from key 4, up to the bound 14
    dump = committed(run.store).dumps.get(future.result(0))
    assert dump.state is DumpState.DONE
    assert_replay_equals_source(out.events, db)
    assert_no_time_travel(out.events, book)


def test_changing_the_chunk_size_while_a_window_is_open_does_not_end_the_dump() -> None:
    db, t = make_db(40)
    out = ListOutput()
    changed = {"done": False}

    def before_high(plan: ChunkPlan) -> None:
        if not changed["done"]:
            run.engine.set_knobs(chunk_size=100)
            changed["done"] = True

    run = Run(db, [out], MemoryStateStore(), settings=fast_settings(5),
              hooks=PhaseHooks(before_high=before_high))
    run.engine.request_dump([t])
    run.go()
    assert reads(out.events) == list(range(40))
    assert low_watermarks(db) == 2  # 5 rows with the old size, 35 with the new one


def test_set_knobs_rejects_a_chunk_size_below_one() -> None:
    db, _ = make_db(1)
    engine = Run(db, [ListOutput()], MemoryStateStore()).engine
    with pytest.raises(DumpRequestError):
        engine.set_knobs(chunk_size=0)
    engine.set_knobs(chunk_size=3, chunk_delay_s=-1)
    assert engine.knobs.chunk_size == 3 and engine.knobs.chunk_delay_s == 0.0


def test_multi_table_dump_of_all_tables() -> None:
    db, t = make_db(7)
    u = db.create_table("shop.u", ["id", "v"], ["id"])
    empty = db.create_table("shop.empty", ["id", "v"], ["id"])
    for k in range(4):
        db.tables[u].rows[(k,)] = {"id": k, "v": 0}
    out, store = ListOutput(), MemoryStateStore()
    run = Run(db, [out], store, settings=fast_settings(3))
    future = run.engine.request_dump(None)
    run.go()
    assert reads(out.events, t) == list(range(7))
    assert reads(out.events, u) == list(range(4))
    assert reads(out.events, empty) == []
    dump = committed(store).dumps.get(future.result(0))
    assert dump.state is DumpState.DONE
    assert {str(p.table) for p in dump.tables} == {"public.t", "shop.u", "shop.empty"}
    assert_replay_equals_source(out.events, db)


def test_initial_dumps_run_on_first_start_only() -> None:
    db, _ = make_db(6)
    out, store = ListOutput(), MemoryStateStore()
    settings = fast_settings(4, initial_dumps=(["public.t"],))
    Run(db, [out], store, settings=settings).go()
    assert reads(out.events) == list(range(6))
    Run(db, [out], store, settings=settings).go()
    assert reads(out.events) == list(range(6))
    assert len(committed(store).dumps.dumps) == 1


def test_stream_resumes_after_the_committed_position() -> None:
    db, t = make_db(0)
    out, store = ListOutput(), MemoryStateStore()
    book = VersionBook()
    for i in range(5):
        n = book.next()
        book.transaction(db, [("upsert", t, {"id": i, "v": n})], n)
    Run(db, [out], store).go()
    first_len = len(out.events)
    assert first_len == 15
    position = committed(store).position
    assert position == Lsn(15)
    for i in range(3):
        n = book.next()
        book.transaction(db, [("delete", t, {"id": i})], n)
    Run(db, [out], store).go()
    assert len(out.events) == first_len + 9
    assert_log_order(out.events, db)
    assert_seq_contiguous(out.events)
    assert replay(out.events) == {(("public", "t"), (k,)): {"id": k, "v": k + 1} for k in (3, 4)}


def test_engine_in_a_thread_with_concurrent_writers() -> None:
    """The smoke scenario with real threads and the real clock."""
    db, t = make_db(0)
    db.transaction([("insert", t, {"id": i, "v": 0}) for i in range(200)])
    out, store = ListOutput(), MemoryStateStore()
    engine = Engine(MemoryConnector(db), [out], store,
                    EngineSettings(chunk_size=7, poll_timeout_s=0.001, flush_interval_s=0.01))
    future = engine.request_dump(["public.t"])
    thread = threading.Thread(target=engine.run)
    thread.start()
    try:
        dump_id = future.result(5)
        rng = random.Random(11)
        for n in range(300):
            k = rng.randrange(250)
            db.transaction([(rng.choice(["upsert", "delete", "update"]), t, {"id": k, "v": n})])
        end = db.log[-1].position  # the last data change; only watermarks follow
        assert end is not None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            dumps, position = engine.status()["dumps"], engine.delivery.state.position
            if dumps and dumps[0]["state"] == "done" and position is not None and position >= end:
                break  # dump finished and everything up to the last change is committed
            time.sleep(0.02)
    finally:
        engine.stop()
        thread.join(10)
    assert not thread.is_alive()
    assert engine.status()["dumps"][0]["state"] == "done"
    assert committed(store).dumps.get(dump_id).state is DumpState.DONE
    assert_replay_equals_source(out.events, db)
    assert_log_order(out.events, db)
    assert_seq_contiguous(out.events)


def test_partial_update_inside_a_window_reads_the_key_again() -> None:
    """An update without its unchanged TOAST column cannot stand in for the chunk row it
    evicts: the key is read again (internal key-list dump) so the full row reaches outputs."""
    db = MemoryDatabase()
    t = db.create_table("public.doc", ["id", "v", "blob"], ["id"])
    for k in range(10):
        db.tables[t].rows[(k,)] = {"id": k, "v": 0, "blob": f"big-{k}"}
    out, store = ListOutput(), MemoryStateStore()
    book = VersionBook()

    def toast(item: Any) -> Any:
        if (isinstance(item, ChangeEvent) and item.op is Op.UPDATE and item.before
                and isinstance(item.after, dict)
                and item.after and item.before.get("blob") == item.after.get("blob")):
            item.after = {c: v for c, v in item.after.items() if c != "blob"}
            item.unchanged = ("blob",)
        return item

    calls = Counter[str]()

    def before_high(plan: ChunkPlan) -> None:
        calls["high"] += 1
        if calls["high"] == 1:
            n = book.next()
            book.transaction(db, [("update", t, {"id": 3, "v": n, "blob": "big-3"})], n)

    run = Run(db, [out], store, settings=fast_settings(5), transform=toast,
              hooks=PhaseHooks(before_high=before_high))
    future = run.engine.request_dump([t])
    run.go()
    partial = [e for e in out.events if e.op is Op.UPDATE]
    assert len(partial) == 1 and partial[0].unchanged == ("blob",)
    assert "blob" not in partial[0].after  # type: ignore[operator]
    read3 = [e for e in out.events if e.op is Op.READ and e.key == (3,)]
    assert len(read3) == 1
    assert read3[0].after == {"id": 3, "v": 1, "blob": "big-3"}
    assert out.events.index(read3[0]) > out.events.index(partial[0])
    assert sorted(reads(out.events)) == list(range(10))
    assert_replay_equals_source(out.events, db)
    assert_no_time_travel(out.events, book)
    # the refetch is an internal dump: committed and done, but not shown to operators
    state = committed(store)
    internal = [d for d in state.dumps.dumps if d.internal]
    assert len(internal) == 1 and internal[0].keys == ((3,),)
    assert internal[0].state is DumpState.DONE
    assert [d["id"] for d in run.engine.status()["dumps"]] == [future.result(0)]


def test_composite_keys_are_dumped_in_key_order() -> None:
    db = MemoryDatabase()
    t = db.create_table("public.pair", ["a", "b", "v"], ["a", "b"])
    for a in range(4):
        for b in ("x", "y", "z"):
            db.tables[t].rows[(a, b)] = {"a": a, "b": b, "v": 0}
    out = ListOutput()
    run = Run(db, [out], MemoryStateStore(), settings=fast_settings(5))
    run.engine.request_dump([t])
    keys_future = run.engine.request_dump(table=t, keys=[[1, "y"], [3, "z"], [9, "q"]])
    run.go()
    read_keys = [e.key for e in out.events if e.op is Op.READ]
    assert read_keys[:12] == sorted(db.tables[t].rows)
    assert read_keys[12:] == [(1, "y"), (3, "z")]
    assert keys_future.result(0)
    assert low_watermarks(db) == 3 + 1  # 12 rows in chunks of 5, and one key-list chunk
    assert_replay_equals_source(out.events, db)


def test_chunk_delay_spaces_the_windows_and_can_be_changed_while_running() -> None:
    db, t = make_db(40)
    out = ListOutput()
    opened: list[float] = []

    def on_poll(run: Run) -> None:
        while low_watermarks(db) > len(opened):
            opened.append(run.clock.now)
        if len(opened) == 3:
            run.engine.set_knobs(chunk_delay_s=0.0)

    run = Run(db, [out], MemoryStateStore(), settings=fast_settings(5, chunk_delay_s=0.5),
              on_poll=on_poll)
    run.engine.request_dump([t])
    run.go()
    assert len(opened) == 8
    gaps = [b - a for a, b in itertools.pairwise(opened)]
    assert all(g >= 0.5 - 1e-9 for g in gaps[:2]), gaps
    assert all(g < 0.1 for g in gaps[3:]), gaps
    assert reads(out.events) == list(range(40))


def test_log_keeps_flowing_during_a_large_dump() -> None:
    """I4: between two polls the engine runs at most one chunk; every log event read is
    forwarded in the same loop turn. I5: a window never holds more than one chunk."""
    db, t = make_db(300)
    out = ListOutput()
    book = VersionBook()
    marks: list[int] = []
    windows: list[int] = []

    def on_poll(run: Run) -> None:
        windows.append(low_watermarks(db))
        if len(windows) >= 2:
            assert windows[-1] - windows[-2] <= 1, "more than one chunk between two polls"
        if len(marks) >= 1:
            forwarded = {e.position for e in out.events if e.op is not Op.READ}
            missing = [p for p in log_positions_expected(db, marks[-1]) if p not in forwarded]
            assert not missing, f"log events held back during the dump: {missing[:5]}"
        if run.polls <= 120:
            n = book.next()
            book.transaction(db, [("upsert", t, {"id": (run.polls * 37) % 350, "v": n})], n)
        marks.append(len(db.log))
        open_chunk = None if run.engine.scheduler is None else run.engine.scheduler.open
        if open_chunk is not None:
            assert len(open_chunk.window.rows) <= 10

    run = Run(db, [out], MemoryStateStore(), settings=fast_settings(10, batch_size=1),
              on_poll=on_poll)
    run.engine.request_dump([t])
    run.go()
    assert windows[-1] >= 30
    assert_replay_equals_source(out.events, db)
    assert_log_order(out.events, db)
    assert_no_time_travel(out.events, book)


def test_restarts_with_the_jsonl_output_and_the_file_state_store(tmp_path: Any) -> None:
    db, t = make_db(60)
    book, rng = VersionBook(), random.Random(5)
    path = tmp_path / "changes.jsonl"
    store = FileStateStore(tmp_path / "state.json")

    def writer(stop_at: int | None) -> Any:
        def on_poll(run: Run) -> bool:
            if len(book.by_txid) < 90:
                n = book.next()
                k = rng.randrange(70)
                book.transaction(db, [(rng.choice(["upsert", "delete", "upsert"]), t,
                                       {"id": k, "v": n})], n)
            return stop_at is not None and run.polls >= stop_at
        return on_poll

    for stop_at in (12, 20, None):
        output = JsonlOutput({"path": str(path)})
        run = Run(db, [output], store, settings=fast_settings(5), on_poll=writer(stop_at),
                  stop_when_idle=stop_at is None)
        if stop_at == 12:
            run.engine.request_dump([t])
        run.go()
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))
    assert replay(lines) == source_rows(db)
    stored = store.load()
    assert stored is not None and stored.data["seq"] == len(lines)


def test_heartbeats_move_the_committed_position_on_an_idle_database() -> None:
    db, t = make_db(0)
    book = VersionBook()
    for i in range(3):
        n = book.next()
        book.transaction(db, [("upsert", t, {"id": i, "v": n})], n)
    last_data = db.log[-1].position
    out, store = ListOutput(), MemoryStateStore()
    run = Run(db, [out], store, settings=fast_settings(5, heartbeat_interval_s=0.1),
              on_poll=lambda r: r.polls >= 100, stop_when_idle=False)
    run.go()
    beats = [i for i in db.log if isinstance(i, Watermark) and i.value.startswith("hb-")]
    assert len(beats) >= 8
    assert_log_order(out.events, db)  # heartbeat transactions never reach outputs
    assert len(out.events) == 9
    state = committed(store)
    assert state.position > last_data
    assert state.position >= beats[-2].position
    assert run.acknowledged[-1] == state.position


def lose_high(item: Any) -> Any:
    """A log transform that loses every high watermark."""
    return None if isinstance(item, Watermark) and item.value.startswith("H-") else item


def test_a_missing_high_watermark_fails_after_the_idle_timeout() -> None:
    db, t = make_db(3)  # one chunk: no chunk is read ahead, so only the idle timeout can tell

    run = Run(db, [ListOutput()], MemoryStateStore(),
              settings=fast_settings(5, window_timeout_s=1.0), transform=lose_high,
              stop_when_idle=False, max_polls=1000)
    run.engine.request_dump([t])
    with pytest.raises(FatalSourceError, match="high watermark"):
        run.go()
    assert 90 <= run.polls <= 150


def test_a_missing_high_watermark_fails_when_the_next_low_watermark_arrives() -> None:
    """The chunk read ahead writes its L after the open chunk's H: L seen first means H was
    lost, which fails at once instead of after the idle timeout."""
    db, t = make_db(10)

    run = Run(db, [ListOutput()], MemoryStateStore(),
              settings=fast_settings(5, window_timeout_s=1.0), transform=lose_high,
              stop_when_idle=False, max_polls=1000)
    run.engine.request_dump([t])
    with pytest.raises(FatalSourceError, match="was not seen before the next chunk's low"):
        run.go()
    assert run.polls < 10


def test_a_busy_log_backlog_is_not_a_window_timeout() -> None:
    """H arrives after a long backlog: the window waits longer than the timeout, but the log
    is never idle, so the dump completes."""
    db, t = make_db(10)
    db.transaction([("upsert", t, {"id": 100 + i, "v": 1}) for i in range(5)])
    for i in range(400):
        db.transaction([("upsert", t, {"id": 200 + i % 50, "v": i + 2})])
    out = ListOutput()
    run = Run(db, [out], MemoryStateStore(), settings=fast_settings(50, window_timeout_s=0.5),
              max_batch=2, max_polls=5000)
    run.engine.request_dump([t])
    run.go()
    assert run.clock.now > 5.0  # the first window stayed open for seconds of busy log
    assert sorted(reads(out.events)) == [*range(10), *range(100, 105), *range(200, 250)]
    assert_replay_equals_source(out.events, db)


class FlippingElection:
    """Leader until told otherwise; records when the engine first learned it was not."""

    def __init__(self, epoch: int = 1) -> None:
        self._epoch = epoch
        self.leader = True
        self.told_not_leader = False

    @property
    def epoch(self) -> int:
        return self._epoch

    def is_leader(self) -> bool:
        if not self.leader:
            self.told_not_leader = True
        return self.leader


class RecordingOutput(ListOutput):
    def __init__(self, election: FlippingElection) -> None:
        super().__init__("recording")
        self.election = election
        self.writes_after_loss = 0

    def write(self, events: Sequence[ChangeEvent]) -> None:
        if not self.election.leader:
            self.writes_after_loss += len(events)
        super().write(events)


class RecordingStore(MemoryStateStore):
    def __init__(self, election: FlippingElection) -> None:
        super().__init__()
        self.election = election
        self.saves_after_loss = 0

    def save(self, data: dict[str, object], expected_version: int | None, epoch: int) -> int:
        if not self.election.leader:
            self.saves_after_loss += 1
        return super().save(data, expected_version, epoch)


@pytest.mark.parametrize(("batch_size", "flush_interval"), [(1000, 1.0), (1, 0.0)])
def test_losing_leadership_stops_emission_at_once(batch_size: int,
                                                  flush_interval: float) -> None:
    """SPEC 5: when leadership is in doubt the engine stops emitting at once: nothing more
    reaches outputs or the state store (a successor may already be writing to them), neither
    what was buffered nor what the current loop turn would deliver and commit."""
    db, t = make_db(40)
    election = FlippingElection()
    out, store = RecordingOutput(election), RecordingStore(election)
    book = VersionBook()

    def on_poll(run: Run) -> None:
        n = book.next()
        book.transaction(db, [("upsert", t, {"id": 100 + run.polls, "v": n})], n)
        if run.polls == 8:
            election.leader = False

    run = Run(db, [out], store, election=election, stop_when_idle=False, on_poll=on_poll,
              settings=fast_settings(5, batch_size=batch_size, flush_interval_s=flush_interval))
    run.engine.request_dump([t])
    state = run.go().engine.delivery.state
    assert election.told_not_leader
    assert committed(store).seq == state.seq
    assert (out.events[-1].seq if out.events else 0) >= state.seq
    assert run.polls == 8
    assert out.writes_after_loss == 0, "events were written after leadership was lost"
    assert store.saves_after_loss == 0, "state was saved after leadership was lost"
