"""The engine with a chunk reader that sends L, SELECT and H at once (``WindowRunner``): the
engine thread collects each window's results between log polls and keeps up to two chunks
ahead of the open window. Same invariants as the inline and worker modes."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest

from dblog.core.dumps import ChunkPlan, DumpState
from dblog.core.model import Op
from dblog.engine import PhaseHooks
from dblog.errors import RetryableSourceError
from dblog.spi import Chunk
from dblog.testing import (
    ListOutput,
    MemoryPendingWindow,
    MemoryStateStore,
    MemoryWindowChunkReader,
)
from tests.unit.engine_script import (
    Run,
    VersionBook,
    assert_log_order,
    assert_no_time_travel,
    assert_replay_equals_source,
    assert_seq_contiguous,
    fast_settings,
)
from tests.unit.test_engine_memory import committed, make_db, reads, truncate_before_high


def window_settings(chunk_size: int) -> Any:
    return fast_settings(chunk_size, chunk_worker=True)


def test_a_dump_under_concurrent_writes_keeps_i1_to_i3_without_a_worker_thread() -> None:
    db, t = make_db(80)
    rng = random.Random(11)
    book = VersionBook()
    out, store = ListOutput(), MemoryStateStore()
    threads: set[str] = set()

    def on_poll(run: Run) -> None:
        threads.update(th.name for th in threading.enumerate())
        if run.polls < 150:
            n = book.next()
            op = rng.choice(["upsert", "update", "delete"])
            book.transaction(db, [(op, t, {"id": rng.randrange(100), "v": n})], n)

    run = Run(db, [out], store, settings=window_settings(7), on_poll=on_poll, windows=True)
    future = run.engine.request_dump([t])
    run.go()
    assert_replay_equals_source(out.events, db)
    assert_log_order(out.events, db)
    assert_no_time_travel(out.events, book)
    assert_seq_contiguous(out.events)
    assert committed(store).dumps.get(future.result(0)).state is DumpState.DONE
    windows = sum(len(r.started) for r in run.connector.window_readers)
    assert windows >= 80 // 7, "the chunks were not read through windows"
    assert not any(name.startswith("dblog-chunks") for name in threads)


def test_the_next_chunks_are_sent_while_the_first_window_waits_for_its_rows() -> None:
    db, t = make_db(30)
    out = ListOutput()
    emitted = {"rows": 0}
    emitted_at_start: list[int] = []

    class Recording(MemoryWindowChunkReader):
        def start_chunk_window(self, *args: Any) -> MemoryPendingWindow:
            emitted_at_start.append(emitted["rows"])
            return super().start_chunk_window(*args)

    run = Run(db, [out], MemoryStateStore(), settings=window_settings(5), windows=True)
    run.connector.chunk_reader = lambda: Recording(db)  # type: ignore[method-assign]
    emit_all = run.engine.delivery.emit_all

    def counting(events: list[Any]) -> None:
        emitted["rows"] += sum(1 for e in events if e.op is Op.READ)
        emit_all(events)

    run.engine.delivery.emit_all = counting  # type: ignore[method-assign]
    run.engine.request_dump([t])
    run.go()
    assert reads(out.events) == list(range(30))
    # every chunk after the first was sent before the rows of the chunk before it went out
    assert all(at <= 5 * (i - 1) for i, at in enumerate(emitted_at_start) if i), \
        emitted_at_start
    assert len(emitted_at_start) == 6  # the 6th chunk reaches the upper bound: no empty 7th


def test_a_truncate_in_a_window_drops_the_chunks_sent_after_it() -> None:
    """The source truncates inside chunk 2's window; chunk 3 (sent ahead, starting after key 9)
    must not count: chunk 2's range is read again from key 4."""
    db, t = make_db(15)
    out = ListOutput()
    book = VersionBook()
    hooks = PhaseHooks(before_high=truncate_before_high(db, t, book, chunk=2,
                                                        rewrite=(6, 8, 11)))
    run = Run(db, [out], MemoryStateStore(), settings=window_settings(5), windows=True,
              source_hooks=hooks)
    future = run.engine.request_dump([t])
    run.go()
    truncate_at = next(i for i, e in enumerate(out.events) if e.op is Op.TRUNCATE)
    assert reads(out.events[:truncate_at]) == [0, 1, 2, 3, 4]
    assert reads(out.events[truncate_at:]) == [6, 8, 11]
    started = [p.after for r in run.connector.window_readers for p in r.started]
    assert started[:3] == [None, (4,), (9,)]
    assert (4,) in started[3:], "chunk 2 was not read again"
    assert committed(run.store).dumps.get(future.result(0)).state is DumpState.DONE
    assert_replay_equals_source(out.events, db)
    assert_no_time_travel(out.events, book)


class _FailingPending:
    def fileno(self) -> int:
        return MemoryPendingWindow(Chunk([]), 0).fileno()

    def collect(self) -> Chunk | None:
        raise RetryableSourceError("the connection to the source dropped")


def test_an_error_collecting_a_window_stops_the_engine_with_it() -> None:
    db, t = make_db(20)

    class Failing(MemoryWindowChunkReader):
        def start_chunk_window(self, low: str, high: str, *args: Any) -> Any:
            return _FailingPending()

    run = Run(db, [ListOutput()], MemoryStateStore(), settings=window_settings(5),
              windows=True)
    run.connector.chunk_reader = lambda: Failing(db)  # type: ignore[method-assign]
    run.engine.request_dump([t])
    with pytest.raises(RetryableSourceError, match="dropped"):
        run.go()


def test_key_list_dumps_are_read_blocking_in_window_mode() -> None:
    db, t = make_db(20)
    out = ListOutput()
    run = Run(db, [out], MemoryStateStore(), settings=window_settings(5), windows=True)
    run.engine.request_dump(table=t, keys=[[3], [17], [9]])
    run.go()
    assert sorted(reads(out.events)) == [3, 9, 17]
    assert all(len(r.started) == 0 for r in run.connector.window_readers)


def test_phase_hooks_take_the_worker_path_even_with_a_window_reader() -> None:
    db, t = make_db(12)
    seen: list[ChunkPlan] = []
    run = Run(db, [ListOutput()], MemoryStateStore(), settings=window_settings(5),
              windows=True, hooks=PhaseHooks(after_low=seen.append))
    run.engine.request_dump([t])
    run.go()
    assert [p.after for p in seen] == [None, (4,), (9,)]
    assert all(len(r.started) == 0 for r in run.connector.window_readers)
