"""The lease lasts half the session timeout ZooKeeper *negotiated*, not the requested one: the
server clamps it to [minSessionTimeout, maxSessionTimeout], and a lease longer than the
session would let a deposed leader emit after its successor was elected."""

from __future__ import annotations

import logging
from typing import cast

import pytest
from kazoo.client import KazooClient

from dblog.ha.election import ZooKeeperElection
from dblog.ha.zk import ZkPaths, negotiated_timeout_s, track_session_timeout
from dblog.testing import FakeClock
from tests.unit.test_ha_renewer import StubClient


class FakeConnection:
    """kazoo's ConnectionHandler._connect returns (read timeout, connect timeout) in ms, the
    read timeout being 2/3 of the negotiated session timeout."""

    def __init__(self, negotiated_ms: int) -> None:
        self.negotiated_ms = negotiated_ms

    def _connect(self, host: str, hostip: str, port: int) -> tuple[float, float]:
        return self.negotiated_ms * 2.0 / 3.0, self.negotiated_ms / 1.0


class NegotiatingStub(StubClient):
    connected = False  # not connected yet when the election starts: nothing to probe

    def __init__(self, negotiated_ms: int) -> None:
        super().__init__()
        self._connection = FakeConnection(negotiated_ms)

    def reconnect(self) -> None:
        self._connection._connect("zk1", "127.0.0.1", 2181)


def test_kazoo_has_the_connect_step_that_is_tracked() -> None:
    client = KazooClient(hosts="127.0.0.1:1")
    assert track_session_timeout(client) and track_session_timeout(client)
    assert negotiated_timeout_s(client) is None  # not connected yet


def test_the_negotiated_timeout_is_read_from_each_connect() -> None:
    stub = NegotiatingStub(2000)
    client = cast(KazooClient, stub)
    assert track_session_timeout(client)
    stub.reconnect()
    assert negotiated_timeout_s(client) == 2.0
    stub._connection.negotiated_ms = 4000
    stub.reconnect()
    assert negotiated_timeout_s(client) == 4.0


def test_the_lease_follows_a_shorter_negotiated_session_timeout(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock(100.0)
    stub = NegotiatingStub(2000)
    election = ZooKeeperElection(cast(KazooClient, stub), ZkPaths("/x"), clock,
                                 session_timeout_s=10.0, instance_id="a")
    try:
        stub.reconnect()  # the server grants 2 s of the 10 requested (maxSessionTimeout)
        with caplog.at_level(logging.WARNING, logger="dblog.ha"):
            election.lease.acquire(1, clock.monotonic())
            election._renew_once()
        assert election.lease.duration_s == 1.0
        clock.advance(1.1)
        assert not election.is_leader(), "the lease outlives a 2 s session"
        assert "state.session_timeout_s" in caplog.text
        assert "maxSessionTimeout" in caplog.text
    finally:
        election.close()


def test_an_untracked_client_keeps_the_requested_timeout() -> None:
    election = ZooKeeperElection(cast(KazooClient, StubClient()), ZkPaths("/x"), FakeClock(),
                                 session_timeout_s=8.0, instance_id="a")
    election.close()
    assert election.lease.duration_s == 4.0


def test_a_connect_step_of_another_shape_still_connects(caplog: pytest.LogCaptureFixture
                                                         ) -> None:
    """The tracking must never break kazoo's connect: an unreadable result is passed on, and
    the requested timeout stays in force."""

    class OtherShape:
        def _connect(self, host: str, hostip: str, port: int) -> object:
            return None

    stub = NegotiatingStub(2000)
    stub._connection = OtherShape()  # type: ignore[assignment]
    client = cast(KazooClient, stub)
    assert track_session_timeout(client)
    with caplog.at_level(logging.WARNING, logger="dblog.ha"):
        assert stub._connection._connect("zk1", "127.0.0.1", 2181) is None
    assert negotiated_timeout_s(client) is None
    assert "cannot read the negotiated ZooKeeper session timeout" in caplog.text
