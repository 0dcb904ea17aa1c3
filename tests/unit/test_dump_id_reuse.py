"""A dump_id names one request: a retry gets the same dump, another request under it is
refused (engine, HA queue of a starting leader, HTTP API: 409)."""

from __future__ import annotations

import threading

import pytest

from dblog.core.dumps import DumpState
from dblog.errors import DumpIdConflict, DumpRequestError
from dblog.spi import DumpRequest
from dblog.testing import ListOutput, MemoryDatabase, MemoryStateStore
from tests.unit.apiserve import served
from tests.unit.engine_script import Run
from tests.unit.test_ha_runner import starting_leader


def two_tables() -> MemoryDatabase:
    db = MemoryDatabase()
    for name in ("public.t", "public.u"):
        table = db.create_table(name, ["id", "v"], ["id"])
        for k in range(5):
            db.tables[table].rows[(k,)] = {"id": k, "v": 0}
    return db


def test_the_engine_refuses_another_request_under_a_known_dump_id() -> None:
    db = two_tables()
    out = ListOutput()
    run = Run(db, [out], MemoryStateStore())
    first = run.engine.request_dump(["public.t"], dump_id="d1")
    retry = run.engine.request_dump(["public.t"], dump_id="d1")
    other_table = run.engine.request_dump(["public.u"], dump_id="d1")
    other_keys = run.engine.request_dump(table="public.t", keys=[[1]], dump_id="d1")
    other_range = run.engine.request_range_dump("public.t", [1], [2], dump_id="d1")
    run.go()
    assert first.result(0) == retry.result(0) == "d1"
    for future in (other_table, other_keys, other_range):
        with pytest.raises(DumpIdConflict, match="'d1' already names another dump") as caught:
            future.result(0)
        assert '"tables":["public.t"]' in caught.value.message
        assert "new dump_id" in str(caught.value.fix)
    dumps = run.engine.status()["dumps"]
    assert [(d["id"], d["state"]) for d in dumps] == [("d1", DumpState.DONE.value)]
    read = [e.key for e in out.events if e.table is not None and e.table.name == "t"]
    assert read == [(k,) for k in range(5)]
    assert not [e for e in out.events if e.table is not None and e.table.name == "u"]


def test_a_retry_after_a_restart_is_answered_even_when_it_no_longer_validates() -> None:
    db = two_tables()
    run = Run(db, [ListOutput()], MemoryStateStore())
    first = run.engine.request_dump(["public.u"], dump_id="d1")
    everything = run.engine.request_dump(dump_id="all")
    run.go()
    del db.tables[next(t for t in db.tables if t.name == "u")]
    db.create_table("public.w", ["id"], ["id"])  # "every table" means more tables now
    again = Run(db, [ListOutput()], run.store)
    retry = again.engine.request_dump(["u"], dump_id="d1")  # the same table, spelt shorter
    retry_all = again.engine.request_dump(dump_id="all")
    other_failing = again.engine.request_dump(["public.nope"], dump_id="d1")
    unknown = again.engine.request_dump(["public.u"], dump_id="d2")
    again.go()
    assert first.result(0) == retry.result(0) == "d1"
    assert everything.result(0) == retry_all.result(0) == "all"
    with pytest.raises(DumpIdConflict):  # another request, even one that fails its checks
        other_failing.result(0)
    with pytest.raises(DumpRequestError, match="u"):
        unknown.result(0)


def test_a_starting_leader_refuses_another_request_under_a_queued_dump_id() -> None:
    ha, zk = starting_leader()
    assert ha.request_dump(DumpRequest(tables=["public.t"], dump_id="q1")) == "q1"
    with pytest.raises(DumpIdConflict, match="q1"):
        ha.request_dump(DumpRequest(table="public.t", keys=[[3]], dump_id="q1"))
    with pytest.raises(DumpIdConflict, match="q1"):
        ha.request_dump(DumpRequest.key_range("public.t", [1], None, "q1"))
    assert ha.request_dump(DumpRequest(tables=("t",), dump_id="q1")) == "q1"
    assert [q["id"] for q in zk.queued()] == ["q1"]


def test_a_starting_leader_checks_a_dump_id_against_the_stored_dumps_too() -> None:
    ha, zk = starting_leader()
    pipeline = ha.pipeline
    assert pipeline is not None
    future = pipeline.engine.request_dump(["public.t"], dump_id="s1")
    run = threading.Thread(target=pipeline.engine.run, daemon=True)
    run.start()
    assert future.result(10) == "s1"
    pipeline.engine.stop()
    run.join(10)
    with pytest.raises(DumpIdConflict, match="s1"):
        ha.request_dump(DumpRequest(table="public.t", keys=[[1]], dump_id="s1"))
    assert ha.request_dump(DumpRequest(tables=["public.t"], dump_id="s1")) == "s1"
    assert zk.queued() == []


def test_the_api_answers_409_for_a_dump_id_reused_with_another_body() -> None:
    ha, zk = starting_leader()
    with served(ha) as client:
        first = client.post("/api/v1/dumps", json={"tables": ["public.t"], "dump_id": "q1"})
        assert first.status_code == 202, first.text
        reused = client.post("/api/v1/dumps", json={"table": "public.t", "keys": [[3]],
                                                     "dump_id": "q1"})
        assert reused.status_code == 409, reused.text
        assert "already names another dump" in reused.text
    assert [q["id"] for q in zk.queued()] == ["q1"]
