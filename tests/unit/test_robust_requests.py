"""Issue 16, finding 1: no dump request stops a pipeline.

Every request is validated completely before it is accepted (names, shapes, key arity,
values); a request that still fails while it runs fails alone (marked failed with the
reason, in the state and the status) and the pipeline goes on; a restart does not run it
again. Requests go through :meth:`Engine.request_dump`, the boundary every caller uses
(the embedded ``Pipeline.dump``, the HTTP API, the HA request queue).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import pytest

from dblog.core.dumps import DumpState
from dblog.core.model import Key, TableId, TableInfo
from dblog.errors import DumpRequestError, FatalSourceError
from dblog.spi import Chunk
from dblog.state import state_from_json
from dblog.testing import ListOutput, MemoryChunkReader, MemoryDatabase, MemoryStateStore
from tests.unit.engine_script import Run, assert_replay_equals_source, fast_settings

T = TableId("public", "t")


def make_db(rows: int = 30) -> MemoryDatabase:
    db = MemoryDatabase()
    db.create_table("public.t", ["id", "v"], ["id"])
    db.create_table("public.pair", ["a", "b", "v"], ["a", "b"])
    db.transaction(("insert", T, {"id": i, "v": i}) for i in range(rows))
    db.transaction(("insert", TableId("public", "pair"), {"a": i, "b": str(i), "v": i})
                   for i in range(5))
    return db


def rejection(future: Future[str]) -> str:
    """The message of a rejected request (the test fails if it was accepted)."""
    error = future.exception(0)
    assert isinstance(error, DumpRequestError), f"expected a rejection, got {error!r}"
    return error.message


BAD_TABLES: list[Any] = [
    [None], [123], [1.5], [b"public.t"], [["public.t"]], [{"public.t": 1}], [""],
    ["public."], [".t"], ["public.t\x00"], ["x" * 5000], [], "public.t", 42,
    ["public.nope"],
]


@pytest.mark.parametrize("tables", BAD_TABLES, ids=[repr(t)[:30] for t in BAD_TABLES])
def test_a_malformed_table_list_is_rejected_and_the_pipeline_goes_on(tables: Any) -> None:
    db, out, store = make_db(), ListOutput(), MemoryStateStore()
    run = Run(db, [out], store, settings=fast_settings(7))
    bad = run.engine.request_dump(tables)
    good = run.engine.request_dump(["public.t"])
    run.go()  # raises if the engine stopped on the bad request
    assert rejection(bad)
    dump = run.engine.status()["dumps"]
    assert [(d["id"], d["state"]) for d in dump] == [(good.result(0), "done")]
    assert_replay_equals_source(out.events, db)


BAD_KEYS: list[tuple[Any, Any, str]] = [
    ("public.t", [1, 2], "a list of keys"),         # keys as bare values
    ("public.t", [[1, 2]], "1 value"),              # wrong arity
    ("public.t", [[]], "1 value"),
    ("public.t", [[None]], "null"),
    ("public.t", [[{"a": 1}]], "string, number or boolean"),
    ("public.t", [[[1]]], "string, number or boolean"),
    ("public.t", [[float("nan")]], "finite"),
    ("public.t", [[float("inf")]], "finite"),
    ("public.t", "12", "a list of keys"),
    ("public.t", [], "at least one key"),
    ("public.t", [[i] for i in range(100_001)], "at most"),
    ("public.pair", [[1]], "2 value"),
    ("public.pair", [[1, "1", 3]], "2 value"),
    (None, [[1]], "table"),
    (123, [[1]], "table name"),
    ("public.nope", [[1]], "unknown table"),
]


@pytest.mark.parametrize("table,keys,reason", BAD_KEYS,
                         ids=[f"{t}-{repr(k)[:20]}" for t, k, _ in BAD_KEYS])
def test_malformed_keys_are_rejected_with_the_reason(table: Any, keys: Any, reason: str) -> None:
    db, out = make_db(), ListOutput()
    run = Run(db, [out], MemoryStateStore(), settings=fast_settings(7))
    bad = run.engine.request_dump(table=table, keys=keys)
    good = run.engine.request_dump(table="public.t", keys=[[3], [5]])
    run.go()
    assert reason in rejection(bad)
    assert good.result(0)
    assert sorted(e.key or () for e in out.events if e.dump_id == good.result(0)) == [(3,), (5,)]


class FailingReader(MemoryChunkReader):
    """A chunk reader whose reads of ``table`` fail with ``error`` (a source that refuses the
    table's rows, or a bug in a connector raising a foreign exception)."""

    def __init__(self, db: MemoryDatabase, table: TableId, error: Exception) -> None:
        super().__init__(db)
        self.table, self.error = table, error

    def read_chunk(self, info: TableInfo, after: Key | None, upper: Key | None,
                   limit: int, inclusive: bool = False) -> Chunk:
        if info.table == self.table:
            raise self.error
        return super().read_chunk(info, after, upper, limit, inclusive)

    def read_keys(self, info: TableInfo, keys: Sequence[Key]) -> Chunk:
        if info.table == self.table:
            raise self.error
        return super().read_keys(info, keys)


ERRORS = [ValueError("Renamed field names must not contain '\"'"),
          FatalSourceError("reading a chunk of public.t: value out of range"),
          DumpRequestError("no such column"), KeyError("id"), TypeError("boom")]


@pytest.mark.parametrize("worker", [False, True], ids=["inline", "worker"])
@pytest.mark.parametrize("error", ERRORS, ids=[type(e).__name__ for e in ERRORS])
def test_a_dump_failing_while_it_runs_fails_alone_and_stays_failed(
        error: Exception, worker: bool) -> None:
    db, out, store = make_db(), ListOutput(), MemoryStateStore()
    pair = TableId("public", "pair")
    run = Run(db, [out], store, settings=fast_settings(7, chunk_worker=worker),
              on_poll=lambda r: _write_once(r, db))
    run.connector.chunk_reader = lambda: FailingReader(db, T, error)  # type: ignore
    bad = run.engine.request_dump(["public.t"])
    keys = run.engine.request_dump(table="public.t", keys=[[1]])
    good = run.engine.request_dump([pair])
    run.go()
    status = {d["id"]: d for d in run.engine.status()["dumps"]}
    for failed in (bad.result(0), keys.result(0)):
        assert status[failed]["state"] == "failed"
        assert str(error).strip("'") in status[failed]["error"]
    assert status[good.result(0)]["state"] == "done"
    assert store.stored is not None
    stored = state_from_json(store.stored.data)
    assert stored.dumps.get(bad.result(0)).state is DumpState.FAILED  # type: ignore[union-attr]
    # the log went on: the write made after the failure reached the output
    assert any(e.table == pair and e.key == (99, "99") for e in out.events)
    # a restart (or a standby taking over) does not run the failed dumps again
    again = Run(db, [out], store, settings=fast_settings(7, chunk_worker=worker))
    again.connector.chunk_reader = lambda: FailingReader(db, T, error)  # type: ignore
    again.go()
    assert again.engine.status()["dumps"] == run.engine.status()["dumps"]
    assert_replay_equals_source(out.events, db)


def _write_once(run: Run, db: MemoryDatabase) -> None:
    """Once every dump finished (two of them failed), a write to the source."""
    scheduler = run.engine.scheduler
    pair = TableId("public", "pair")
    if scheduler is None or scheduler.live.active() is not None or not scheduler.live.dumps \
            or (99, "99") in db.tables[pair].rows:
        return
    db.transaction([("insert", pair, {"a": 99, "b": "99", "v": 0})])


def test_validation_errors_of_a_connector_are_wrapped_not_raised() -> None:
    """A connector whose parse_key raises a foreign error still only rejects the request."""
    db, out = make_db(), ListOutput()

    class Strict(MemoryChunkReader):
        def parse_key(self, info: TableInfo, values: Sequence[object]) -> Key:
            raise OverflowError("int too large to convert")

    run = Run(db, [out], MemoryStateStore(), settings=fast_settings(7))
    run.connector.chunk_reader = lambda: Strict(db)  # type: ignore[method-assign]
    bad = run.engine.request_dump(table="public.t", keys=[[2**70]])
    good = run.engine.request_dump(["public.t"])
    run.go()
    assert "int too large" in rejection(bad)
    assert good.result(0)


@pytest.mark.parametrize("knobs", [
    {"chunk_size": True}, {"chunk_size": 0}, {"chunk_size": 10**7}, {"chunk_size": 2.5},
    {"chunk_size": "100"}, {"chunk_delay_s": float("nan")}, {"chunk_delay_s": float("inf")},
    {"chunk_delay_s": False}, {"chunk_delay_s": "1"},
    {"chunk_size": 5, "chunk_delay_s": float("nan")},
])
def test_bad_knobs_are_refused_and_change_nothing(knobs: dict[str, Any]) -> None:
    run = Run(make_db(), [ListOutput()], MemoryStateStore(), settings=fast_settings(7))
    with pytest.raises(DumpRequestError):
        run.engine.set_knobs(**knobs)
    assert (run.engine.knobs.chunk_size, run.engine.knobs.chunk_delay_s) == (7, 0.0)
    run.engine.set_knobs(chunk_size=9, chunk_delay_s=1)
    assert (run.engine.knobs.chunk_size, run.engine.knobs.chunk_delay_s) == (9, 1.0)
