"""Issue 16 with ZooKeeper state: nothing in the dump request queue stops the instance that
serves it or blocks the requests behind it, and a poison request (queued through the CLI or
straight into ZooKeeper) takes down neither the leader nor the standby."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from dblog.errors import DumpRequestError
from dblog.ha import requests
from dblog.ha.zk import ZkPaths, ZooKeeperStateStore, connect

from .hautil import Cluster
from .pgutil import read_events, replayed, source_rows, wait_until
from .test_robust_pg import execute

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


def test_poison_requests_take_down_neither_the_leader_nor_the_standby(
        pg_dsn: str, zk_hosts: str, tmp_path: Path) -> None:
    """Two ``dblog run`` candidates with ZooKeeper state. Requests that used to stop the
    leader (and then the standby, which took the queued request over) arrive through the CLI
    and straight into ZooKeeper; a dump that fails while it runs (its table dropped) fails
    alone. The leader survives all of it; killed, its standby takes over and survives too,
    without running the failed dump again, and the output replays to the source."""
    execute(pg_dsn, "CREATE TABLE t (id int PRIMARY KEY, v int)",
            "INSERT INTO t SELECT g, 0 FROM generate_series(1, 300) g",
            'CREATE TABLE pois (id int PRIMARY KEY, "a""b" int, "c\\d" text)',
            "INSERT INTO pois SELECT g, g, 'x' FROM generate_series(1, 200) g",
            "CREATE TABLE big (id int PRIMARY KEY, v int)",
            "INSERT INTO big SELECT g, 0 FROM generate_series(1, 6000) g")
    cluster = Cluster(tmp_path, pg_dsn, zk_hosts, ["public.t"], chunk_delay_s=0.03)
    try:
        _poison_and_failover(cluster, pg_dsn)
    except BaseException:
        print(cluster.logs(6000))
        raise
    finally:
        cluster.stop()
    events = read_events(cluster.out)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    kept = {k: v for k, v in replayed(events).items() if k[0][1] in ("t", "pois")}
    assert kept == source_rows(pg_dsn, ["public.t", "public.pois"])


def _poison_and_failover(cluster: Cluster, dsn: str) -> None:
    first = cluster.start()
    assert cluster.wait_leader() == first
    standby = cluster.start()
    wait_until(lambda: cluster.client.exists(f"{cluster.paths.base}/api/{standby}") is not None,
               60, "the standby's API")
    pois = cluster.cli("dump", "-t", "public.pois")["dump_id"]  # a column named a"b
    refused = _cli_fails(cluster, "dump", "-t", "public.t", "--keys", "[[1e30], [2]]")
    assert "invalid input syntax" in refused or "out of range" in refused, refused
    client, paths = cluster.client, cluster.paths
    for raw in (b"garbage", b'{"id": "nul1", "tables": [null]}'):
        client.create(f"{paths.requests}/req-", raw, sequence=True)
    huge = requests.queue_dump(client, paths, table="public.t", keys=[[2**70]])
    big = requests.queue_dump(client, paths, ["public.big"])
    wait_until(lambda: (cluster.dump(big) or (0, ""))[0] >= 3, 120, "the dump of big to run")
    execute(dsn, "DROP TABLE big")
    wait_until(lambda: (cluster.dump(big) or (0, ""))[1] == "failed", 120, "big to fail")
    wait_until(lambda: (cluster.dump(pois) or (0, ""))[1] == "done", 120, "the a\"b dump")
    again = cluster.cli("dump", "-t", "public.t")["dump_id"]  # chunks still read after that
    wait_until(lambda: (cluster.dump(again) or (0, ""))[1] == "done", 120, "a dump after it")
    refusals = requests.rejected(client, paths)
    assert "out of range" in refusals[huge] and "nul1" in refusals, refusals
    assert cluster.leader() == first and all(p.poll() is None for p in cluster.procs.values())
    state = cluster.state()
    assert state is not None
    failed = state.dumps.get(big)
    assert failed is not None and failed.error and "big" in failed.error, failed
    execute(dsn, "INSERT INTO t VALUES (1000, 1)", "UPDATE pois SET \"a\"\"b\" = -1")
    cluster.procs[first].send_signal(signal.SIGKILL)
    assert cluster.wait_leader(other_than=first) == standby
    execute(dsn, "INSERT INTO t VALUES (1001, 1)")
    cluster.wait_caught_up(dsn)
    time.sleep(2)  # the new leader keeps running: nothing it took over stops it
    assert cluster.procs[standby].poll() is None and cluster.leader() == standby
    after = cluster.state()
    assert after is not None and after.dumps.get(big) == failed  # not run again


def _cli_fails(cluster: Cluster, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "dblog", *args, "--config",
                           str(cluster.config)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0, done.stdout
    return done.stderr
