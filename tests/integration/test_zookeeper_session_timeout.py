"""The lease follows the session timeout the real server negotiated (the harness's
minSessionTimeout=500 ms clamps a 0.4 s request up; a maxSessionTimeout clamps down the same
way, which tests/unit/test_ha_session_timeout.py covers)."""

from __future__ import annotations

import threading
import uuid

import pytest
from kazoo.client import KazooClient

from dblog.ha.election import ZooKeeperElection
from dblog.ha.zk import ZkPaths, connect, negotiated_timeout_s
from dblog.runtime.clock import SystemClock

pytestmark = pytest.mark.integration
REQUESTED_S = 0.4


def paths() -> ZkPaths:
    return ZkPaths.of("/session-timeout-test", uuid.uuid4().hex[:10])


def test_the_lease_is_half_the_negotiated_session_timeout(zk_hosts: str) -> None:
    client = connect(zk_hosts, REQUESTED_S, 10.0)
    try:
        negotiated = negotiated_timeout_s(client)
        assert negotiated is not None and negotiated > REQUESTED_S
        election = ZooKeeperElection(client, paths(), SystemClock(),
                                     session_timeout_s=REQUESTED_S, instance_id="a")
        assert election.campaign(threading.Event()) == 1
        assert election.lease.duration_s == negotiated / 2
        election.close()
    finally:
        client.stop()
        client.close()


def test_a_client_connected_before_the_election_is_probed(zk_hosts: str) -> None:
    client = KazooClient(hosts=zk_hosts, timeout=REQUESTED_S)
    client.start(10)
    try:
        election = ZooKeeperElection(client, paths(), SystemClock(),
                                     session_timeout_s=REQUESTED_S, instance_id="a")
        election.close()
        assert election.lease.duration_s > REQUESTED_S / 2
    finally:
        client.stop()
        client.close()
