"""The HA instance's control contract without a ZooKeeper server: a leader whose pipeline is
built but not streaming yet (the start of a term) queues dump requests in ZooKeeper under the
client's own id, and the API answers 202 for them; a term's restarts after transient failures
are counted, and the leader says it leads while it waits to restart."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from dblog.app.pipeline import Pipeline
from dblog.errors import DumpRequestError, RetryableSourceError
from dblog.ha import requests
from dblog.ha.runner import HaInstance
from dblog.ha.zk import ZkPaths
from dblog.spi import DumpRequest
from dblog.spi.metrics import Counters
from dblog.testing import FakeClock, ListOutput, MemoryConnector, MemoryStateStore
from tests.unit.apiserve import served
from tests.unit.engine_script import fast_settings
from tests.unit.test_engine_memory import make_db


class FakeZk:
    """The part of KazooClient the request queue uses: persistent sequential nodes."""

    def __init__(self) -> None:
        self.nodes: dict[str, bytes] = {}

    def ensure_path(self, path: str) -> None:
        pass

    def create(self, path: str, data: bytes, sequence: bool = False, **_: Any) -> str:
        if sequence:
            path = f"{path}{len(self.nodes):010d}"
        self.nodes[path] = data
        return path

    def get_children(self, path: str) -> list[str]:
        return [p.rsplit("/", 1)[1] for p in self.nodes if p.rsplit("/", 1)[0] == path]

    def get(self, path: str) -> tuple[bytes, None]:
        return self.nodes[path], None

    def queued(self) -> list[dict[str, Any]]:
        return [json.loads(v) for v in self.nodes.values()]


def starting_leader() -> tuple[HaInstance, FakeZk]:
    """An HA leader in its first term whose pipeline exists but does not stream yet."""
    db, _ = make_db(10)
    zk = FakeZk()
    ha = HaInstance.__new__(HaInstance)
    ha.client = zk
    ha.paths = ZkPaths.of("/dblog", "x")
    ha.terms, ha.restarts, ha.in_term, ha._stop = 1, 0, True, threading.Event()
    ha.metrics, ha.store = Counters(), MemoryStateStore()  # type: ignore[assignment]
    ha.pipeline = Pipeline(MemoryConnector(db), [ListOutput()], state=ha.store,
                           settings=fast_settings(4))
    return ha, zk


def test_a_starting_leader_queues_under_the_requests_dump_id() -> None:
    ha, zk = starting_leader()
    assert ha.request_dump(DumpRequest(tables=["public.t"], dump_id="mine-1")) == "mine-1"
    assert ha.request_dump(DumpRequest.key_range("public.t", [1], [5], "mine-2")) == "mine-2"
    assert ha.request_dump(DumpRequest(tables=["public.t"], dump_id="mine-1")) == "mine-1"
    assert [q["id"] for q in zk.queued()] == ["mine-1", "mine-2"]  # the retry queued nothing
    assert requests.dump_request(zk.queued()[1]).dump_id == "mine-2"
    fresh = ha.request_dump(DumpRequest(tables=["public.t"]))
    assert fresh not in ("mine-1", "mine-2") and len(zk.queued()) == 3


def test_a_bad_dump_id_is_refused_before_it_is_queued() -> None:
    ha, zk = starting_leader()
    with pytest.raises(DumpRequestError, match="dump id"):
        ha.request_dump(DumpRequest(tables=["public.t"], dump_id="a/b"))
    assert zk.nodes == {}


@pytest.mark.parametrize("body", [
    {"tables": ["public.t"], "dump_id": "mine-1"},
    {"table": "public.t", "from": [9], "to": [10], "dump_id": "mine-1"}])
def test_the_api_answers_202_for_a_dump_queued_by_a_starting_leader(
        body: dict[str, Any]) -> None:
    ha, zk = starting_leader()
    with served(ha) as client:
        assert client.get("/api/v1/status").json()["role"] == "leader"
        for _ in range(2):  # the client's retry gets the same answer and queues nothing
            answer = client.post("/api/v1/dumps", json=body)
            assert answer.status_code == 202, answer.text
            assert answer.json()["id"] == "mine-1" and answer.json()["state"] == "queued"
    assert [q["id"] for q in zk.queued()] == ["mine-1"]


class FlakyConnector(MemoryConnector):
    """Its log reader fails (retryably) on the polls numbered in ``failing`` (1 is the first
    poll), counted across runs."""

    failing = frozenset({1, 2, 3})
    polls = 0

    def log_reader(self) -> Any:
        reader = super().log_reader()
        poll = reader.poll

        def flaky(timeout: float) -> Any:
            self.polls += 1
            if self.polls in self.failing:
                raise RetryableSourceError("source went away (test)")
            return poll(timeout)

        reader.poll = flaky  # type: ignore[method-assign]
        return reader


class Lease:
    def held(self) -> bool:
        return True


class Election:
    lease = Lease()

    def is_leader(self) -> bool:
        return True

    def resign(self) -> None:
        pass


def leader_between_terms(monkeypatch: pytest.MonkeyPatch,
                         connector: MemoryConnector) -> HaInstance:
    """An HA instance elected (Election) but not yet leading, whose pipelines (one per run,
    as ``Pipeline.from_config`` builds them) read ``connector``; no request pump."""
    store = MemoryStateStore()
    monkeypatch.setattr(Pipeline, "from_config", staticmethod(
        lambda *_, metrics=None, **__: Pipeline(
            connector, [ListOutput()], state=store, max_restarts=0, metrics=metrics,
            settings=fast_settings(4, poll_timeout_s=0.01))))
    monkeypatch.setattr(HaInstance, "_serve_requests", lambda *_: None)
    ha, _ = starting_leader()
    ha.pipeline, ha.in_term, ha.clock = None, False, FakeClock()
    ha.config, ha.store = None, store  # type: ignore[assignment]  # from_config is a stub
    ha.election = Election()  # type: ignore[assignment]
    return ha


def test_a_terms_restarts_are_counted_and_it_leads_while_it_waits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    db, _ = make_db(5)
    ha = leader_between_terms(monkeypatch, FlakyConnector(db))
    waits: list[dict[str, Any]] = []

    def backoff(_delay: float | None = None) -> bool:  # the status between two runs
        waits.append(ha.status())
        return ha._stop.is_set()

    monkeypatch.setattr(ha._stop, "wait", backoff)
    term = threading.Thread(target=ha._lead, args=(1,), daemon=True)
    term.start()
    with served(ha) as client:
        deadline = time.monotonic() + 20
        while not (ha.pipeline is not None and ha.pipeline.is_running()):
            assert time.monotonic() < deadline and term.is_alive()
            time.sleep(0.01)
        metrics = client.get("/metrics").text.splitlines()
        ha.request_stop()
        term.join(10)
    assert [(w["role"], w["running"], w.get("restarts")) for w in waits] == [
        ("leader", False, 1), ("leader", False, 2), ("leader", False, 3)]
    assert "dblog_engine_restarts_total 3.0" in metrics and "dblog_leader 1.0" in metrics
    assert ha.status()["role"] == "standby"  # the term is over


def test_between_two_runs_the_leader_is_not_ready_and_refuses_no_dump() -> None:
    ha, zk = starting_leader()
    ha.pipeline, ha.restarts = None, 2
    ha.election = Election()  # type: ignore[assignment]
    with served(ha) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["role"] == "leader"
        assert "dblog_leader 1.0" in client.get("/metrics").text.splitlines()
        answer = client.post("/api/v1/dumps", json={"tables": ["public.t"], "dump_id": "d"})
        assert answer.status_code == 202, answer.text  # queued for the next run, not a 421
        knobs = client.patch("/api/v1/knobs", json={"chunk_size": 5})
        assert knobs.status_code == 503 and "restarting" in knobs.json()["detail"]
    assert [q["id"] for q in zk.queued()] == ["d"]


class FailsOnceAfterEvents(FlakyConnector):
    """Fails once, on its 20th poll (the log delivered by then)."""

    failing = frozenset({20})


def test_the_event_counters_keep_counting_across_a_restart_within_a_term(
        monkeypatch: pytest.MonkeyPatch) -> None:
    db, table = make_db(0)
    for k in range(3):
        db.transaction([("upsert", table, {"id": k, "v": 1})])
    ha = leader_between_terms(monkeypatch, FailsOnceAfterEvents(db))
    monkeypatch.setattr(ha._stop, "wait", lambda _delay=None: ha._stop.is_set())
    term = threading.Thread(target=ha._lead, args=(1,), daemon=True)
    term.start()
    with served(ha) as client:
        deadline = time.monotonic() + 20
        while not (ha.restarts == 1 and ha.pipeline is not None and ha.pipeline.is_running()):
            assert time.monotonic() < deadline and term.is_alive()
            time.sleep(0.01)
        metrics = client.get("/metrics").text.splitlines()
        ha.request_stop()
        term.join(10)
    assert 'dblog_events_total{op="insert",table="public.t"} 3.0' in metrics, metrics
