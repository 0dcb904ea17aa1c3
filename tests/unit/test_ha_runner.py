"""The HA instance's control contract without a ZooKeeper server: a leader whose pipeline is
built but not streaming yet (the start of a term) queues dump requests in ZooKeeper under the
client's own id, and the API answers 202 for them."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from dblog.app.pipeline import Pipeline
from dblog.errors import DumpRequestError
from dblog.ha import requests
from dblog.ha.runner import HaInstance
from dblog.ha.zk import ZkPaths
from dblog.spi import DumpRequest
from dblog.testing import ListOutput, MemoryConnector, MemoryStateStore
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
    ha.terms, ha._stop = 1, threading.Event()
    ha.pipeline = Pipeline(MemoryConnector(db), [ListOutput()], state=MemoryStateStore(),
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
