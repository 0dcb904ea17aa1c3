"""A dump query that meets a changed table (``TableChanged``: a column dropped or renamed while
the table is dumped) is read again with the table's metadata read afresh, instead of failing
the dump for good; a table that keeps changing fails the dump after a few chunks in a row."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dblog.core.model import Key, TableId, TableInfo
from dblog.engine.scheduler import TABLE_CHANGES_RETRIED
from dblog.errors import TableChanged
from dblog.spi import Chunk, ForgettingChunkReader
from dblog.testing import ListOutput, MemoryChunkReader, MemoryDatabase, MemoryStateStore
from tests.unit.engine_script import Run, assert_replay_equals_source, fast_settings

T = TableId("public", "t")


class ChangingReader(MemoryChunkReader):
    """Its first ``failures`` chunk reads and max-key reads of ``t`` fail as a query naming a
    dropped column would; counts what it was told to forget."""

    def __init__(self, db: MemoryDatabase, failures: int, on_max_key: bool = False) -> None:
        super().__init__(db)
        self.failures, self.on_max_key = failures, on_max_key
        self.forgotten: list[TableId] = []
        self.infos = 0

    def _maybe_fail(self, table: TableId) -> None:
        if table == T and self.failures > 0:
            self.failures -= 1
            raise TableChanged(f"reading a chunk of {table}: column \"gone\" does not exist")

    def table_info(self, table: TableId, key_columns: Sequence[str] | None = None) -> TableInfo:
        self.infos += table == T
        return super().table_info(table, key_columns)

    def max_key(self, info: TableInfo) -> Key | None:
        if self.on_max_key:
            self._maybe_fail(info.table)
        return super().max_key(info)

    def read_chunk(self, info: TableInfo, after: Key | None, upper: Key | None,
                   limit: int, inclusive: bool = False) -> Chunk:
        self._maybe_fail(info.table)
        return super().read_chunk(info, after, upper, limit, inclusive)

    def forget_table(self, table: TableId) -> None:
        self.forgotten.append(table)


def _db() -> MemoryDatabase:
    db = MemoryDatabase()
    db.create_table("public.t", ["id", "v"], ["id"])
    db.transaction(("insert", T, {"id": i, "v": i}) for i in range(30))
    return db


@pytest.mark.parametrize("worker", [False, True], ids=["inline", "worker"])
@pytest.mark.parametrize("on_max_key", [False, True], ids=["chunk", "max-key"])
def test_a_changed_table_is_read_again_with_fresh_metadata(worker: bool, on_max_key: bool
                                                           ) -> None:
    db, out = _db(), ListOutput()
    reader = ChangingReader(db, TABLE_CHANGES_RETRIED, on_max_key)
    assert isinstance(reader, ForgettingChunkReader)
    run = Run(db, [out], MemoryStateStore(), settings=fast_settings(7, chunk_worker=worker))
    run.connector.chunk_reader = lambda: reader  # type: ignore[method-assign]
    dump = run.engine.request_dump(["public.t"])
    run.go()
    status = {d["id"]: d for d in run.engine.status()["dumps"]}
    assert status[dump.result(0)]["state"] == "done", status
    # with chunk_worker the jobs' reader (here the same object) is told too
    assert reader.forgotten == [T] * TABLE_CHANGES_RETRIED * (2 if worker else 1)
    assert reader.infos == 1 + TABLE_CHANGES_RETRIED  # the metadata read afresh each time
    assert sorted(e.key or () for e in out.events if e.dump_id) == [(i,) for i in range(30)]
    assert_replay_equals_source(out.events, db)


def test_a_table_that_keeps_changing_fails_the_dump_with_the_cause() -> None:
    db, out = _db(), ListOutput()
    reader = ChangingReader(db, TABLE_CHANGES_RETRIED + 1)
    run = Run(db, [out], MemoryStateStore(), settings=fast_settings(7))
    run.connector.chunk_reader = lambda: reader  # type: ignore[method-assign]
    dump = run.engine.request_dump(["public.t"])
    run.go()
    status = {d["id"]: d for d in run.engine.status()["dumps"]}
    assert status[dump.result(0)]["state"] == "failed"
    assert 'column "gone" does not exist' in status[dump.result(0)]["error"]
