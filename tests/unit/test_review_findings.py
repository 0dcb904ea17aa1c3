"""Review findings: each test demonstrates a correctness bug (they fail on the reviewed code)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import pytest

from dblog.connectors.postgres.positions import Lsn
from dblog.connectors.postgres.wal2json import Wal2JsonDecoder
from dblog.core.model import ChangeEvent, Key, LogItem, Op, TableId, TableInfo
from dblog.engine import Engine
from dblog.errors import FatalSourceError, RetryableSourceError
from dblog.spi import Chunk
from dblog.testing import (
    ListOutput,
    MemoryChunkReader,
    MemoryConnector,
    MemoryDatabase,
    MemoryStateStore,
)
from tests.unit.engine_script import Run, assert_replay_equals_source, fast_settings, row_of

T = TableId("public", "t")


# -- helpers ------------------------------------------------------------------------------


class LaggingChunkReader(MemoryChunkReader):
    """A chunk reader whose snapshot has not seen ``pending`` yet (PostgreSQL commit
    visibility lag): it returns ``stale`` rows (and the stale maximum key) and names the
    transactions as in progress."""

    def __init__(self, db: MemoryDatabase, stale: dict[Key, dict[str, Any]] | None,
                 pending: frozenset[int]) -> None:
        super().__init__(db)
        self.stale, self.pending = stale, pending

    def _rows(self, info: TableInfo) -> list[tuple[Key, dict[str, Any]]]:
        if self.stale is None:
            return self._sorted(info)
        return sorted((k, dict(r)) for k, r in self.stale.items())

    def max_key(self, info: TableInfo) -> Key | None:
        rows = self._rows(info)
        return rows[-1][0] if rows else None

    def read_chunk(self, info: TableInfo, after: Key | None, upper: Key | None,
                   limit: int, inclusive: bool = False) -> Chunk:
        picked = [(k, r) for k, r in self._rows(info)
                  if (after is None or k > after or (inclusive and k == after))
                  and (upper is None or k <= upper)]
        # like PostgreSQL's txid_status(): the lagging transactions' commits are logged
        return Chunk(picked[:limit], self.pending, self.pending)

    def read_keys(self, info: TableInfo, keys: Sequence[Key]) -> Chunk:
        return super().read_keys(info, keys)  # refetches see the current rows


def catch_up_after_one_read(reader: LaggingChunkReader) -> None:
    """The reader's snapshot catches up once a chunk was read (a re-read sees everything)."""
    original = reader.read_chunk

    def read_once(info: TableInfo, after: Key | None, upper: Key | None, limit: int,
                  inclusive: bool = False) -> Chunk:
        chunk = original(info, after, upper, limit, inclusive)
        reader.stale, reader.pending = None, frozenset()
        return chunk

    reader.read_chunk = read_once  # type: ignore[method-assign]


def _lagging_run(db: MemoryDatabase, reader: LaggingChunkReader,
                 **kw: Any) -> tuple[Run, ListOutput]:
    out = ListOutput()
    settings = fast_settings(100, **kw.pop("settings", {}))
    run = Run(db, [out], MemoryStateStore(), settings=settings, **kw)
    run.connector.chunk_reader = lambda: reader  # type: ignore[method-assign]
    run.engine.request_dump(["public.t"])
    run.go()
    return run, out


# -- engine: the snapshot guard (recent transactions) --------------------------------------


def test_truncate_in_a_forwarded_invisible_transaction_discards_the_chunk() -> None:
    """engine._process / recent.py: a TRUNCATE has no key, so RecentTransactions never records
    it; when its transaction was forwarded before the chunk but is still invisible to the
    chunk's snapshot, guard_forwarded does not discard the chunk and the stale pre-truncate
    rows are emitted after the TRUNCATE (resurrected rows, I2/I3)."""
    db = MemoryDatabase()
    t = db.create_table("public.t", ["id", "v"], ["id"])
    for k in range(10):
        db.tables[t].rows[(k,)] = {"id": k, "v": 0}
    stale = {k: dict(r) for k, r in db.tables[t].rows.items()}
    db.truncate(t)  # txid 1: forwarded before the first chunk, invisible to its snapshot
    reader = LaggingChunkReader(db, stale, frozenset({1}))
    # the snapshot catches up once the chunk was read (a re-read then sees the truncate)
    catch_up_after_one_read(reader)
    _, out = _lagging_run(db, reader)
    truncate_at = next(i for i, e in enumerate(out.events) if e.op is Op.TRUNCATE)
    late_reads = [e.key for e in out.events[truncate_at:] if e.op is Op.READ]
    assert late_reads == [], f"rows resurrected after the TRUNCATE: {late_reads}"
    assert_replay_equals_source(out.events, db)


def _big_unchanged_in_txid_1(item: LogItem) -> LogItem:
    """Transaction 1's update as PostgreSQL logs an unchanged TOAST value: without ``big``."""
    if isinstance(item, ChangeEvent) and item.op is Op.UPDATE and item.txid == 1:
        after = {c: v for c, v in row_of(item.after or {}).items() if c != "big"}
        return ChangeEvent(item.op, item.table, item.key, None, after, item.position,
                           item.txid, item.commit_ts, item.old_key, ("big",))
    return item


def test_unchanged_toast_update_in_a_forwarded_invisible_transaction_is_refetched() -> None:
    """window.guard_forwarded: a forwarded update that lacks an unchanged TOAST column evicts
    the full chunk row without listing the key in ``refetch`` (on_change does). The consumer
    never receives the column (SPEC 2: a partial row must never evict a full one)."""
    db = MemoryDatabase()
    t = db.create_table("public.t", ["id", "big", "v"], ["id"])
    for k in range(5):
        db.tables[t].rows[(k,)] = {"id": k, "big": f"large-{k}", "v": 0}
    db.transaction([("update", t, {"id": 3, "big": "large-3", "v": 1})])  # txid 1

    reader = LaggingChunkReader(db, None, frozenset({1}))
    _, out = _lagging_run(db, reader, transform=_big_unchanged_in_txid_1)
    assert_replay_equals_source(out.events, db)


def test_unchanged_toast_key_change_in_a_forwarded_invisible_transaction_is_refetched() -> None:
    """window.guard_forwarded: as above, for an update that also changes the key: the old key
    held the chunk's full row, the new key is the partial one and must be read again."""
    db = MemoryDatabase()
    t = db.create_table("public.t", ["id", "big", "v"], ["id"])
    for k in range(5):
        db.tables[t].rows[(k,)] = {"id": k, "big": f"large-{k}", "v": 0}
    stale = {k: dict(r) for k, r in db.tables[t].rows.items()}  # what the SELECT sees
    db.transaction([("update", t, {"id": 100, "big": "large-3", "v": 1, "__old_key__": [3]})])

    reader = LaggingChunkReader(db, stale, frozenset({1}))
    _, out = _lagging_run(db, reader, transform=_big_unchanged_in_txid_1)
    assert_replay_equals_source(out.events, db)


def test_pending_transaction_evicted_from_the_recent_index_does_not_let_a_stale_row_win() -> None:
    """recent.py / window.guard_forwarded: once a forwarded transaction is evicted from the
    bounded RecentTransactions index, keys_of() returns None, the same as "not seen yet", so
    the guard keeps the chunk's stale row and emits it after the newer update (time travel).
    An evicted (or, after a restart, forgotten) pending transaction must be treated like
    TOO_LARGE (discard and re-read the chunk)."""
    db = MemoryDatabase()
    t = db.create_table("public.t", ["id", "v"], ["id"])
    for k in range(10):
        db.tables[t].rows[(k,)] = {"id": k, "v": 0}
    stale = {k: dict(r) for k, r in db.tables[t].rows.items()}
    db.transaction([("update", t, {"id": 3, "v": 1})])  # txid 1: lagging
    for k in (5, 6, 7, 8):  # later transactions push txid 1 out of the index
        db.transaction([("update", t, {"id": k, "v": 1})])
        stale[(k,)] = dict(db.tables[t].rows[(k,)])
    reader = LaggingChunkReader(db, stale, frozenset({1}))
    catch_up_after_one_read(reader)
    _, out = _lagging_run(db, reader, settings={"recent_keys": 2})
    assert_replay_equals_source(out.events, db)


# -- engine: resources ------------------------------------------------------------------------


class _Closing(MemoryChunkReader):
    def __init__(self, db: MemoryDatabase) -> None:
        super().__init__(db)
        self.closed = False

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("worker", [False, True])
def test_run_closes_what_it_opened_when_a_later_connection_fails(worker: bool) -> None:
    """engine.Engine.run: chunk_reader()/watermark_writer() are opened before the try/finally;
    when a later one fails (a transient RetryableSourceError, retried by Pipeline.run), the
    connections opened before it are never closed: each restart leaks them."""
    db = MemoryDatabase()
    db.create_table("public.t", ["id"], ["id"])
    connector = MemoryConnector(db)
    opened: list[_Closing] = []

    def chunk_reader() -> _Closing:
        reader = _Closing(db)
        opened.append(reader)
        return reader

    def failing_writer() -> Any:
        raise RetryableSourceError("connecting to the source: too many clients")

    connector.chunk_reader = chunk_reader  # type: ignore[method-assign]
    connector.watermark_writer = failing_writer  # type: ignore[method-assign]
    engine = Engine(connector, [ListOutput()], MemoryStateStore(),
                    fast_settings(10, chunk_worker=worker))
    with pytest.raises(RetryableSourceError):
        engine.run()
    assert opened and all(r.closed for r in opened), "a chunk reader connection leaked"


# -- wal2json decoding ---------------------------------------------------------------------


def _col(name: str, type_name: str, value: Any) -> dict[str, Any]:
    return {"name": name, "type": type_name, "value": value}


class _Catalog:
    """Like PostgresConnector._columns_of: cached unless ``fresh``."""

    def __init__(self, columns: tuple[str, ...]) -> None:
        self.current = columns
        self.cache: dict[TableId, tuple[str, ...]] = {}

    def __call__(self, table: TableId, fresh: bool) -> tuple[str, ...]:
        if fresh or table not in self.cache:
            self.cache[table] = self.current
        return self.cache[table]


def _decoder(catalog: _Catalog) -> Wal2JsonDecoder:
    return Wal2JsonDecoder("test", TableId("dblog", "watermark"), catalog)


def _decode(decoder: Wal2JsonDecoder, message: dict[str, Any], lsn: int) -> Any:
    """The message through the same parse as the replication stream's bytes."""
    return decoder.decode(orjson.dumps(message), lsn)


def test_begin_is_positioned_at_nextlsn_and_refused_without_it() -> None:
    """Replica guards order a PostgreSQL transaction by the commit end on its BEGIN: a BEGIN
    without ``nextlsn`` must stop the source, not fall back to the (unordered) first LSN."""
    decoder = _decoder(_Catalog(("id",)))
    begin = _decode(decoder, {"action": "B", "xid": 7, "nextlsn": "0/16B3748"}, 0x16B3000)
    assert begin.op is Op.BEGIN and begin.position == Lsn.parse("0/16B3748")
    with pytest.raises(FatalSourceError, match="nextlsn") as caught:
        _decode(decoder, {"action": "B", "xid": 8}, 0x16B3800)
    assert "include-lsn" in (caught.value.fix or "")


def test_truncate_as_first_message_of_a_table_does_not_lose_its_key_columns() -> None:
    """wal2json._meta caches a table's key columns from the first message's ``pk``; a TRUNCATE
    message has no ``pk``, so after a restart whose first message for a table is a TRUNCATE
    every later event of that table has key None (the drop rule and outputs break)."""
    decoder = _decoder(_Catalog(("id", "v")))
    _decode(decoder, {"action": "T", "xid": 7, "schema": "public", "table": "t"}, 100)
    event = _decode(decoder,
        {"action": "I", "xid": 8, "schema": "public", "table": "t",
         "columns": [_col("id", "integer", 1), _col("v", "text", "a")],
         "pk": [{"name": "id", "type": "integer"}]}, 200)
    assert isinstance(event, ChangeEvent)
    assert event.key == (1,)


def test_unchanged_toast_column_is_detected_after_a_column_was_added() -> None:
    """wal2json._row_event/_complete_toast compare column *counts*: after ADD COLUMN, an update
    that leaves the TOAST column out has as many columns as the cached count, so the missing
    column is neither completed nor marked unchanged (a partial row passed off as complete)."""
    catalog = _Catalog(("id", "big"))
    decoder = _decoder(catalog)
    pk = [{"name": "id", "type": "integer"}]
    full = _decode(decoder,
        {"action": "U", "xid": 1, "schema": "public", "table": "t", "pk": pk,
         "columns": [_col("id", "integer", 1), _col("big", "text", "x" * 10)],
         "identity": [_col("id", "integer", 1)]}, 100)
    assert isinstance(full, ChangeEvent) and full.unchanged == ()
    catalog.current = ("id", "big", "c")  # ALTER TABLE t ADD COLUMN c int
    partial = _decode(decoder,
        {"action": "U", "xid": 2, "schema": "public", "table": "t", "pk": pk,
         "columns": [_col("id", "integer", 1), _col("c", "integer", 5)],
         "identity": [_col("id", "integer", 1)]}, 200)
    assert isinstance(partial, ChangeEvent)
    assert partial.unchanged == ("big",), f"after={partial.after} unchanged={partial.unchanged}"


def test_numeric_conversion_follows_column_names_not_column_count() -> None:
    """wal2json._row caches converters per column *count*: after a DDL that keeps the count
    (DROP COLUMN note; ADD COLUMN amount numeric) the new numeric column is not converted, so
    the log gives 5 while a dump gives "5" (SPEC 3: identical mapping on both paths; for a key
    column the drop rule would not match)."""
    decoder = _decoder(_Catalog(("id", "note")))
    pk = [{"name": "id", "type": "integer"}]
    _decode(decoder, {"action": "I", "xid": 1, "schema": "public", "table": "t", "pk": pk,
                            "columns": [_col("id", "integer", 1), _col("note", "text", "a")]},
                           100)
    event = _decode(decoder,
        {"action": "I", "xid": 2, "schema": "public", "table": "t", "pk": pk,
         "columns": [_col("id", "integer", 2), _col("amount", "numeric", 5)]}, 200)
    assert isinstance(event, ChangeEvent) and isinstance(event.after, dict)
    assert event.after["amount"] == "5"


def test_pending_transaction_forwarded_before_a_restart_does_not_let_a_stale_row_win() -> None:
    """engine._resume starts a fresh RecentTransactions: a transaction forwarded (and
    committed in the state) by the previous run that is still invisible to the first chunk
    SELECT after the restart is unknown to the guard, so its stale row is emitted after the
    newer update (time travel). Same root cause as eviction: "not in the index" is taken to
    mean "not forwarded yet"."""
    db = MemoryDatabase()
    t = db.create_table("public.t", ["id", "v"], ["id"])
    for k in range(10):
        db.tables[t].rows[(k,)] = {"id": k, "v": 0}
    stale = {k: dict(r) for k, r in db.tables[t].rows.items()}
    db.transaction([("update", t, {"id": 3, "v": 1})])  # txid 1: lagging
    out, store = ListOutput(), MemoryStateStore()
    Run(db, [out], store, settings=fast_settings(100)).go()  # forwards and commits txid 1
    assert any(e.op is Op.UPDATE for e in out.events)
    reader = LaggingChunkReader(db, stale, frozenset({1}))
    catch_up_after_one_read(reader)
    second = Run(db, [out], store, settings=fast_settings(100))
    second.connector.chunk_reader = lambda: reader  # type: ignore[method-assign]
    second.engine.request_dump(["public.t"])
    second.go()
    assert_replay_equals_source(out.events, db)
