"""The lease renewer of ZooKeeperElection against a stub kazoo client (no server): it never
dies, and a renewal that finishes after the term it was made for changes nothing."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoNodeError

from dblog.ha.election import ZooKeeperElection
from dblog.ha.lease import LeaseState
from dblog.ha.zk import ZkPaths
from dblog.runtime.clock import SystemClock

SESSION = 42


class StubClient:
    """Answers ``get`` of the leader znode as owned by session 42; ``on_get`` runs inside
    the call (the connection dropping, a new term starting) before it answers."""

    def __init__(self) -> None:
        self.state = KazooState.CONNECTED
        self.live = True
        self.on_get: Callable[[], None] = lambda: None
        self.gets = 0
        self.deleted: list[str] = []

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        return (SESSION, b"pw") if self.live else None  # kazoo: None while not connected

    def ensure_path(self, path: str) -> None: ...
    def create(self, path: str, value: bytes = b"", **_: Any) -> None: ...
    def add_listener(self, fn: object) -> None: ...
    def remove_listener(self, fn: object) -> None: ...

    def delete(self, path: str) -> None:
        self.deleted.append(path)

    def get(self, path: str) -> tuple[bytes, SimpleNamespace]:
        self.gets += 1
        self.on_get()
        return b"{}", SimpleNamespace(ephemeralOwner=SESSION)


@pytest.fixture()
def stub() -> StubClient:
    return StubClient()


@pytest.fixture()
def election(stub: StubClient) -> Iterator[ZooKeeperElection]:
    made = ZooKeeperElection(cast(KazooClient, stub), ZkPaths("/x"), SystemClock(),
                             session_timeout_s=0.08, instance_id="a")
    yield made
    made.close()


def wait_for(cond: Callable[[], bool], timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_renewer_survives_the_connection_dropping_during_its_read(
        stub: StubClient, election: ZooKeeperElection) -> None:
    def drop_once() -> None:
        if stub.gets == 1:
            stub.live = False  # the reply arrived, then the connection dropped

    stub.on_get = drop_once
    election.lease.acquire(1, SystemClock().monotonic())
    assert wait_for(lambda: stub.gets >= 1)
    stub.live = True  # reconnected: the next renewals must still happen
    assert wait_for(lambda: stub.gets >= 4), "the renewer stopped renewing"
    assert election._renewer.is_alive()
    assert election.lease.state is LeaseState.LEADER and election.is_leader()


def test_renewer_logs_an_unexpected_error_and_goes_on(
        stub: StubClient, election: ZooKeeperElection,
        caplog: pytest.LogCaptureFixture) -> None:
    def fail_once() -> None:
        if stub.gets == 1:
            raise RuntimeError("boom in the renewer")

    stub.on_get = fail_once
    with caplog.at_level(logging.ERROR, logger="dblog.ha"):
        election.lease.acquire(1, SystemClock().monotonic())
        assert wait_for(lambda: stub.gets >= 4), "the renewer stopped renewing"
    assert election._renewer.is_alive()
    assert any("boom in the renewer" in (r.exc_text or "") + r.getMessage()
               for r in caplog.records), caplog.text


def test_resign_while_disconnected_does_not_raise(stub: StubClient,
                                                   election: ZooKeeperElection) -> None:
    election.lease.acquire(1, SystemClock().monotonic())
    stub.live = False
    stub.on_get = lambda: None
    election.resign()  # before: TypeError ('NoneType' object is not subscriptable)
    assert election.lease.state is LeaseState.LOST
    assert stub.deleted == []  # ownership unknown: left to the session's expiry


def test_resign_deletes_the_znode_it_owns(stub: StubClient,
                                          election: ZooKeeperElection) -> None:
    election.lease.acquire(1, SystemClock().monotonic())
    election.resign()
    assert stub.deleted == ["/x/leader"]


def test_a_renewal_from_an_earlier_term_does_not_end_the_next_one(
        stub: StubClient, election: ZooKeeperElection) -> None:
    """Term 1's renewal reads the znode gone; meanwhile term 1 ended and term 2 began. Its
    answer ("not ours") is about term 1 and must not depose term 2."""
    new_term = threading.Event()

    def term_changes_during_the_read() -> None:
        if stub.gets == 1:
            election.lease.lose()
            election.lease.reset()
            election.lease.acquire(2, SystemClock().monotonic())
            new_term.set()
            raise NoNodeError()

    stub.on_get = term_changes_during_the_read
    election.lease.acquire(1, SystemClock().monotonic())
    assert new_term.wait(3)
    assert wait_for(lambda: stub.gets >= 3)
    assert election.lease.state is LeaseState.LEADER
    assert election.lease.epoch == 2 and election.is_leader()


def test_the_lease_ignores_answers_tagged_with_another_term() -> None:
    from dblog.ha.lease import Lease
    from dblog.testing import FakeClock

    clock = FakeClock()
    lease = Lease(clock, duration_s=5.0)
    lease.acquire(2, clock.monotonic())
    lease.lose(epoch=1)
    assert lease.snapshot() == (LeaseState.LEADER, 2)
    lease.suspend()
    lease.reconnected(False, clock.monotonic(), epoch=1)
    assert lease.state is LeaseState.SUSPENDED
    lease.reconnected(True, clock.monotonic(), epoch=2)
    lease.lose(epoch=2)
    assert lease.snapshot() == (LeaseState.LOST, 2)
