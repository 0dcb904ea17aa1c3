"""Issue 16, finding 2 (silent losses) on the memory source: start-up requests are checked
at start, and nothing is stored when they are refused."""

from __future__ import annotations

import logging

import pytest

from dblog.core.model import TableId
from dblog.errors import ConfigError
from dblog.testing import ListOutput, MemoryDatabase, MemoryStateStore
from tests.unit.engine_script import Run, assert_replay_equals_source, fast_settings


def make_db() -> MemoryDatabase:
    db = MemoryDatabase()
    for name in ("public.a", "public.b"):
        table = db.create_table(name, ["id", "v"], ["id"])
        db.transaction(("insert", table, {"id": i, "v": i}) for i in range(12))
    return db


def test_an_unknown_table_in_initial_dumps_refuses_the_start_and_stores_nothing() -> None:
    db, store = make_db(), MemoryStateStore()
    settings = fast_settings(5, initial_dumps=(("public.a", "public.nope"), ("public.b",)))
    with pytest.raises(ConfigError) as refused:
        Run(db, [ListOutput()], store, settings=settings).go()
    assert "initial_dumps[0]" in refused.value.message
    assert "public.nope" in refused.value.message
    assert refused.value.fix is not None and "initial_dumps_skip_unavailable" in refused.value.fix
    assert store.stored is None  # a corrected config starts afresh and dumps everything
    fixed = fast_settings(5, initial_dumps=(("public.a",), ("public.b",)))
    out = ListOutput()
    run = Run(db, [out], store, settings=fixed).go()
    assert [d["state"] for d in run.engine.status()["dumps"]] == ["done", "done"]
    assert_replay_equals_source(out.events, db)


def test_with_the_skip_option_each_unavailable_table_is_left_out_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    db, store, out = make_db(), MemoryStateStore(), ListOutput()
    settings = fast_settings(5, initial_dumps=(("public.a", "public.nope", "public.gone"),
                                               ("public.missing",), ("public.b",)),
                             initial_dumps_skip_unavailable=True)
    with caplog.at_level(logging.WARNING, logger="dblog.engine"):
        run = Run(db, [out], store, settings=settings).go()
    dumps = run.engine.status()["dumps"]
    assert [[t["table"] for t in d["tables"]] for d in dumps] == [[["public", "a"]],
                                                                  [["public", "b"]]]
    assert all(d["state"] == "done" for d in dumps)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for name in ("public.nope", "public.gone", "public.missing"):
        assert sum(name in w for w in warned) == 1, warned
    assert_replay_equals_source(out.events, db)
    assert {e.table for e in out.events if e.dump_id} == {TableId("public", "a"),
                                                          TableId("public", "b")}


def with_keyless(db: MemoryDatabase) -> MemoryDatabase:
    table = db.create_table("public.k", ["v"], [])
    db.transaction(("insert", table, {"v": i}) for i in range(3))
    return db


def test_a_keyless_table_in_initial_dumps_refuses_the_start_and_stores_nothing() -> None:
    db, store = with_keyless(make_db()), MemoryStateStore()
    settings = fast_settings(5, initial_dumps=(("public.a",), ("public.k", "public.b")))
    with pytest.raises(ConfigError) as refused:
        Run(db, [ListOutput()], store, settings=settings).go()
    assert "initial_dumps[1]" in refused.value.message and "public.k" in refused.value.message
    assert store.stored is None


def test_with_the_skip_option_a_keyless_table_is_left_out_and_a_dump_of_all_skips_it(
        caplog: pytest.LogCaptureFixture) -> None:
    db, out = with_keyless(make_db()), ListOutput()
    settings = fast_settings(5, initial_dumps=(("public.k", "public.a"), None),
                             initial_dumps_skip_unavailable=True)
    with caplog.at_level(logging.WARNING, logger="dblog.engine"):
        run = Run(db, [out], MemoryStateStore(), settings=settings).go()
    dumps = run.engine.status()["dumps"]
    assert [sorted(tuple(t["table"]) for t in d["tables"]) for d in dumps] == [
        [("public", "a")], [("public", "a"), ("public", "b")]]
    assert all(d["state"] == "done" for d in dumps)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("public.k" in w for w in warned) == 2, warned  # once per request
    assert {e.table for e in out.events if e.dump_id} == {TableId("public", "a"),
                                                          TableId("public", "b")}
