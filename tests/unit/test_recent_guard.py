"""The snapshot guard for transactions forwarded before the low watermark but invisible to the
chunk SELECT (PostgreSQL commit visibility lag, e.g. waiting for a synchronous standby)."""

from __future__ import annotations

import threading
import time

from dblog.core.model import ChangeEvent, Key, TableId, TableInfo
from dblog.core.recent import UNKNOWN, RecentTransactions
from dblog.engine import Engine, EngineSettings
from dblog.spi import Chunk
from dblog.testing import (
    ListOutput,
    MemoryChunkReader,
    MemoryConnector,
    MemoryDatabase,
    MemoryStateStore,
    replay,
)

T = TableId("public", "t")


def test_index_keeps_keys_and_bounds_memory() -> None:
    recent = RecentTransactions(max_keys=5, max_keys_per_tx=3)
    recent.add(1, T, (1,))
    recent.add(1, T, (2,))
    assert recent.keys_of(1) == {("public", "t", (1,), False), ("public", "t", (2,), False)}
    for k in range(4):
        recent.add(2, T, (k,))
    assert recent.keys_of(2) == UNKNOWN
    for tx in range(3, 10):
        recent.add(tx, T, (tx,))
    assert recent.keys_of(1) == UNKNOWN, "evicted transactions are unknown, not unseen"
    assert recent.keys_of(9) == {("public", "t", (9,), False)}
    assert recent.evicted >= 1
    assert recent.keys_of(42) is None


class LaggingChunkReader(MemoryChunkReader):
    """Returns rows as they were before a transaction, and names it as still in progress: the
    situation of a commit that was logged (and forwarded) but not yet visible."""

    def __init__(self, db: MemoryDatabase, stale: dict[tuple[int, ...], dict[str, int]],
                 pending: frozenset[int]) -> None:
        super().__init__(db)
        self.stale, self.pending = stale, pending

    def read_chunk(self, info: TableInfo, after: Key | None, upper: Key | None,
                   limit: int, inclusive: bool = False) -> Chunk:
        chunk = super().read_chunk(info, after, upper, limit, inclusive)
        rows = [(k, self.stale.get(k, r)) for k, r in chunk.rows]
        return Chunk(rows, self.pending)


def _run(lagging: bool) -> tuple[list[ChangeEvent], MemoryDatabase]:
    db = MemoryDatabase()
    t = db.create_table("public.t", ["id", "v"], ["id"])
    db.transaction([("insert", t, {"id": i, "v": 0}) for i in range(10)])
    db.transaction([("update", t, {"id": 3, "v": 1})])  # the lagging transaction
    lag_txid = 2
    connector = MemoryConnector(db)
    stale: dict[tuple[int, ...], dict[str, int]] = {(3,): {"id": 3, "v": 0}} if lagging else {}
    connector.chunk_reader = lambda: LaggingChunkReader(  # type: ignore[method-assign]
        db, stale, frozenset({lag_txid}) if lagging else frozenset())
    out = ListOutput()
    engine = Engine(connector, [out], MemoryStateStore(),
                    EngineSettings(chunk_size=100, poll_timeout_s=0, flush_interval_s=0))
    # the engine forwards the whole log before its first chunk, so the lagging transaction is
    # emitted before the low watermark
    engine.request_dump(["public.t"])
    thread = threading.Thread(target=engine.run)
    thread.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        dumps = engine.status()["dumps"]
        if dumps and dumps[0]["state"] == "done":
            break
        time.sleep(0.01)
    engine.stop()
    thread.join()
    return out.events, db


def test_forwarded_invisible_transaction_evicts_its_keys_from_the_chunk() -> None:
    events, db = _run(lagging=True)
    reads = {e.key for e in events if e.op.value == "read"}
    assert (3,) not in reads, "the stale chunk row of the lagging transaction was emitted"
    assert reads == {(k,) for k in range(10)} - {(3,)}
    src = {(("public", "t"), k): r for k, r in db.tables[T].rows.items()}
    assert replay(events) == src


def test_without_the_guard_the_stale_row_would_win() -> None:
    """The same run with the guard's input removed shows what it protects against."""
    events, db = _run(lagging=False)
    reads = {e.key for e in events if e.op.value == "read"}
    assert (3,) in reads  # no lag: the row is read and is current
    src = {(("public", "t"), k): r for k, r in db.tables[T].rows.items()}
    assert replay(events) == src
