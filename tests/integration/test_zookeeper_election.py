"""Election, lease and fencing against a real ZooKeeper (no source database needed)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from kazoo.client import KazooClient

from dblog.errors import DumpRequestError, FencedError
from dblog.ha import requests
from dblog.ha.election import ZooKeeperElection, read_leader
from dblog.ha.lease import LeaseState
from dblog.ha.zk import ZkPaths, ZooKeeperStateStore, connect
from dblog.harness.postgres import HarnessError, free_port
from dblog.harness.zookeeper import ZooKeeperServer, start_zookeeper
from dblog.runtime.clock import SystemClock
from tests.conftest import unavailable

from .pgutil import wait_until

pytestmark = pytest.mark.integration
SESSION_S = 3.0


@pytest.fixture()
def own_zk() -> Iterator[ZooKeeperServer]:
    """A server of this test's own, for tests that stop and restart it."""
    try:
        server = start_zookeeper()
    except (HarnessError, OSError) as exc:
        unavailable("ZooKeeper", str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture()
def paths() -> ZkPaths:
    return ZkPaths.of("/election-test", uuid.uuid4().hex[:10])


class Node:
    """One candidate: client, election, fenced store."""

    def __init__(self, hosts: str, paths: ZkPaths, name: str,
                 session_s: float = SESSION_S) -> None:
        # one server entry, not connect()'s spread list: expire_session() relies on kazoo
        # looking the hosts up again after a dropped connection
        self.client = KazooClient(hosts=hosts, timeout=session_s, connection_retry={
            "max_tries": -1, "delay": 0.1, "max_delay": 1.0})
        self.client.start(10)
        self.election = ZooKeeperElection(self.client, paths, SystemClock(),
                                          session_timeout_s=session_s, instance_id=name)
        self.store = ZooKeeperStateStore(self.client, paths, fenced=True)

    def close(self) -> None:
        self.election.close()
        self.client.stop()
        self.client.close()


@pytest.fixture()
def nodes(zk_hosts: str, paths: ZkPaths) -> Iterator[list[Node]]:
    made: list[Node] = []
    yield made
    for node in made:
        node.close()


def campaign_in_background(node: Node) -> tuple[threading.Thread, list[int | None]]:
    result: list[int | None] = []
    stop = threading.Event()
    thread = threading.Thread(target=lambda: result.append(node.election.campaign(stop)),
                              daemon=True)
    thread.start()
    return thread, result


def expire_session(hosts: str, client: KazooClient) -> None:
    """End ``client``'s session from outside, as the server does after a partition: a twin
    takes the session over and closes it, while ``client`` is pointed at a dead port so it
    cannot win the session back meanwhile; then it may reconnect (and learn it expired)."""
    client.set_hosts(f"127.0.0.1:{free_port()}")
    try:
        twin = KazooClient(hosts=hosts, client_id=client.client_id, timeout=SESSION_S)
        twin.start(10)
        twin.stop()
        twin.close()
    finally:
        client.set_hosts(hosts)


def test_one_leader_epochs_grow_and_a_standby_takes_over(
    zk_hosts: str, paths: ZkPaths, nodes: list[Node]
) -> None:
    a, b = Node(zk_hosts, paths, "a"), Node(zk_hosts, paths, "b")
    nodes += [a, b]
    epoch_a = a.election.campaign(threading.Event())
    assert epoch_a == 1 and a.election.is_leader()
    thread, result = campaign_in_background(b)
    time.sleep(1.0)
    assert not result and not b.election.is_leader(), "a standby must wait"
    assert read_leader(a.client, paths)["instance"] == "a"  # type: ignore[index]
    a.election.resign()
    thread.join(10)
    assert result == [2] and b.election.is_leader() and not a.election.is_leader()
    assert read_leader(b.client, paths)["instance"] == "b"  # type: ignore[index]


def test_a_stale_leaders_state_write_is_rejected_by_zookeeper(
    zk_hosts: str, paths: ZkPaths, nodes: list[Node]
) -> None:
    a, b = Node(zk_hosts, paths, "a"), Node(zk_hosts, paths, "b")
    nodes += [a, b]
    epoch_a = a.election.campaign(threading.Event())
    assert epoch_a is not None
    version = a.store.save({"seq": 1}, None, epoch_a)
    thread, result = campaign_in_background(b)
    expire_session(zk_hosts, a.client)
    thread.join(15)
    assert result and result[0] is not None and result[0] > epoch_a
    wait_until(lambda: a.election.lease.state is LeaseState.LOST, 10, "a to see LOST")
    assert not a.election.is_leader()
    # the zombie's write: right version, old epoch, successor has not written yet
    zombie = ZooKeeperStateStore(connect(zk_hosts, SESSION_S), paths, fenced=True)
    try:
        with pytest.raises(FencedError, match="newer leader"):
            zombie.save({"seq": 99, "zombie": True}, version, epoch_a)
    finally:
        zombie.client.stop()
        zombie.client.close()
    stored = b.store.load()
    assert stored is not None and stored.data == {"seq": 1} and stored.version == version
    assert b.store.save({"seq": 2}, version, result[0]) == version + 1
    assert b.store.load().data == {"seq": 2}  # type: ignore[union-attr]


def test_suspended_connection_stops_emission_and_the_same_session_resumes(
    own_zk: ZooKeeperServer, paths: ZkPaths
) -> None:
    # a session that outlives the server's restart even on a loaded machine (a 3 s session
    # expired in CI while the JVM started, a 20 s one once at a load near 8, the restarted
    # server declaring it expired): the test is about a suspension, not an expiry
    node = Node(own_zk.hosts, paths, "a", session_s=40.0)
    try:
        epoch = node.election.campaign(threading.Event())
        assert epoch is not None and node.election.is_leader()
        session = node.client.client_id[0]
        own_zk.stop_server()
        wait_until(lambda: not node.election.is_leader(), 2.0, "emission to stop")
        assert node.election.lease.state in (LeaseState.SUSPENDED, LeaseState.LEADER)
        own_zk.start_server()  # down for less than the session timeout
        # one connect attempt to a server still starting can take most of a session (kazoo's
        # timeout per host); an expiry would show as LOST, never as leadership
        wait_until(node.election.is_leader, 90, "leadership to resume")
        assert node.election.epoch == epoch and node.client.client_id[0] == session
    finally:
        node.close()


def test_an_expired_session_loses_leadership(zk_hosts: str, paths: ZkPaths,
                                             nodes: list[Node]) -> None:
    a = Node(zk_hosts, paths, "a")
    nodes.append(a)
    assert a.election.campaign(threading.Event()) == 1
    expire_session(zk_hosts, a.client)
    wait_until(lambda: a.election.lease.state is LeaseState.LOST, 10, "LOST")
    assert not a.election.is_leader()
    wait_until(lambda: a.client.connected, 10, "a new session")
    assert read_leader(a.client, paths) is None
    assert a.election.campaign(threading.Event()) == 2  # back to candidate, new term


def test_dump_requests_are_durable_ordered_and_served_once(zk_hosts: str,
                                                           paths: ZkPaths) -> None:
    client = connect(zk_hosts, SESSION_S)
    try:
        ZooKeeperStateStore(client, paths)  # creates the layout
        first = requests.queue_dump(client, paths, ["public.a"])
        second = requests.queue_dump(client, paths, ["public.missing"])
        third = requests.queue_dump(client, paths, None)
        assert [r["id"] for _, r in requests.pending(client, paths)] == [first, second, third]
        served: list[dict[str, Any]] = []

        def submit(request: dict[str, Any]) -> Future[str]:
            future: Future[str] = Future()
            if request["tables"] == ["public.missing"]:
                future.set_exception(DumpRequestError("unknown table public.missing"))
            else:
                served.append(request)
                future.set_result(request["id"])
            return future

        assert requests.consume(client, paths, submit) == 3
        assert [r["id"] for r in served] == [first, third]
        assert requests.pending(client, paths) == []
        assert requests.rejected(client, paths) == {second: "unknown table public.missing"}
    finally:
        client.stop()
        client.close()
