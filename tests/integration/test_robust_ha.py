"""Issue 16 with ZooKeeper state: nothing in the dump request queue stops the instance that
serves it or blocks the requests behind it, and a poison request (queued through the CLI or
straight into ZooKeeper) takes down neither the leader nor the standby."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from kazoo.client import KazooClient

from dblog.errors import DumpRequestError
from dblog.ha import requests
from dblog.ha.zk import ZkPaths, ZooKeeperStateStore, connect

pytestmark = pytest.mark.integration


@pytest.fixture()
def zk(zk_hosts: str) -> Iterator[tuple[KazooClient, ZkPaths]]:
    client = connect(zk_hosts, 10.0)
    paths = ZkPaths.of(f"/robust-{uuid.uuid4().hex[:8]}", "p")
    ZooKeeperStateStore(client, paths)  # creates the layout
    try:
        yield client, paths
    finally:
        client.stop()
        client.close()


BAD_SHAPES: list[dict[str, Any]] = [
    {"tables": [None]}, {"tables": [123]}, {"tables": "public.t"}, {"tables": []},
    {"table": "public.t", "keys": [1, 2]}, {"table": "public.t", "keys": [[None]]},
    {"keys": [[1]]}, {"table": "public.t", "keys": [[float("inf")]]},
]


def test_a_request_of_the_wrong_shape_is_refused_before_it_is_queued(
        zk: tuple[KazooClient, ZkPaths]) -> None:
    client, paths = zk
    for bad in BAD_SHAPES:
        with pytest.raises(DumpRequestError):
            requests.queue_dump(client, paths, bad.get("tables"), table=bad.get("table"),
                                keys=bad.get("keys"))
    assert client.get_children(paths.requests) == []


FOREIGN_NODES: list[tuple[bytes, str]] = [
    (b"not json", "not JSON"),
    (b"\xff\xfe", "not JSON"),
    (b"[1, 2]", "a JSON list"),
    (b'{"tables": null}', "without a valid id"),
    (b'{"id": "../../x", "tables": null}', "without a valid id"),
    (b'{"id": "shape1", "tables": [null]}', "a table name must be a string"),
    (b'{"id": "shape2", "table": "public.t", "keys": [1, 2]}', "a list of keys"),
    (json.dumps({"id": "shape3", "table": "public.t", "keys": [[2**200]]}).encode(),
     "out of range"),
]


def test_nodes_that_are_not_requests_are_rejected_and_the_queue_goes_on(
        zk: tuple[KazooClient, ZkPaths]) -> None:
    client, paths = zk
    before = requests.queue_dump(client, paths, ["public.a"])
    nodes = [client.create(f"{paths.requests}/req-", raw, sequence=True)
             for raw, _ in FOREIGN_NODES]
    after = requests.queue_dump(client, paths, table="public.a", keys=[[1], ["x"]])
    assert [r["id"] for _, r in requests.pending(client, paths)] == [before, after]
    served: list[str] = []

    def submit(request: dict[str, Any]) -> Future[str]:
        future: Future[str] = Future()
        served.append(request["id"])
        future.set_result(request["id"])
        return future

    assert requests.consume(client, paths, submit) == len(FOREIGN_NODES) + 2
    assert served == [before, after]
    assert client.get_children(paths.requests) == []
    refused = requests.rejected(client, paths)
    for node, (raw, reason) in zip(nodes, FOREIGN_NODES, strict=True):
        name = node.rsplit("/", 1)[-1] if b'"shape' not in raw else \
            json.loads(raw)["id"]  # a valid id names the rejection
        assert reason in refused.get(name, ""), (name, reason, refused)
    assert len(refused) == len(FOREIGN_NODES)
