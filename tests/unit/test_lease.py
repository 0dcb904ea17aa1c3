"""Unit tests of the leadership lease (dblog.ha.lease): pure, no ZooKeeper."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dblog.ha.lease import Lease, LeaseState
from dblog.testing import FakeClock


def leader(clock: FakeClock, duration: float = 2.0, epoch: int = 3) -> Lease:
    lease = Lease(clock, duration)
    lease.acquire(epoch, clock.monotonic())
    return lease


def state_of(lease: Lease) -> LeaseState:
    """The state read through a call: mypy keeps ``lease.state`` narrowed by an earlier
    assert across a method call that changes it (``reset``)."""
    return lease.state


def test_a_candidate_is_not_leader() -> None:
    lease = Lease(FakeClock(), 2.0)
    assert not lease.valid() and not lease.held()
    assert lease.state is LeaseState.CANDIDATE


def test_acquire_makes_leader_with_the_epoch() -> None:
    clock = FakeClock(100)
    lease = leader(clock, epoch=7)
    assert lease.valid() and lease.held() and lease.epoch == 7


def test_the_lease_expires_without_renewal_like_a_frozen_process() -> None:
    clock = FakeClock(100)
    lease = leader(clock, duration=2.0)
    clock.advance(1.99)
    assert lease.valid()
    clock.advance(0.02)
    assert not lease.valid() and lease.expired()
    assert lease.state is LeaseState.LEADER  # the term may go on if the session is still alive


def test_renewal_counts_from_when_the_request_was_sent() -> None:
    clock = FakeClock(100)
    lease = leader(clock, duration=2.0)
    sent = clock.monotonic() + 1.0
    clock.advance(1.5)  # the answer came late
    lease.renew(sent)
    clock.advance(1.4)  # 2.4 s after acquire, 1.4 s after the renewal request was sent
    assert lease.valid()
    clock.advance(0.2)
    assert not lease.valid()


def test_an_old_renewal_never_moves_the_lease_back() -> None:
    clock = FakeClock(100)
    lease = leader(clock, duration=2.0)
    lease.renew(99.0)
    clock.advance(1.9)
    assert lease.valid()


def test_suspend_stops_emission_at_once() -> None:
    clock = FakeClock(100)
    lease = leader(clock)
    lease.suspend()
    assert not lease.valid()
    assert lease.held() and lease.state is LeaseState.SUSPENDED
    lease.renew(clock.monotonic())  # a renewal does not resume a suspended lease
    assert not lease.valid()


def test_reconnect_with_the_znode_still_ours_resumes() -> None:
    clock = FakeClock(100)
    lease = leader(clock)
    lease.suspend()
    clock.advance(5)
    lease.reconnected(True, clock.monotonic())
    assert lease.valid() and lease.state is LeaseState.LEADER


def test_reconnect_without_the_znode_loses() -> None:
    clock = FakeClock(100)
    lease = leader(clock)
    lease.suspend()
    lease.reconnected(False, clock.monotonic())
    assert not lease.valid() and not lease.held() and lease.state is LeaseState.LOST


def test_lost_is_final_until_reset_and_a_new_acquire() -> None:
    clock = FakeClock(100)
    lease = leader(clock, epoch=1)
    lease.lose()
    lease.renew(clock.monotonic())
    lease.reconnected(True, clock.monotonic())
    assert not lease.valid() and lease.state is LeaseState.LOST
    lease.reset()
    assert state_of(lease) is LeaseState.CANDIDATE and not lease.valid()
    lease.acquire(2, clock.monotonic())
    assert lease.valid() and lease.epoch == 2


def test_a_candidate_is_not_changed_by_connection_events() -> None:
    lease = Lease(FakeClock(), 2.0)
    lease.suspend()
    lease.lose()
    lease.reconnected(True, 0.0)
    assert lease.state is LeaseState.CANDIDATE and not lease.valid()


def test_duration_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Lease(FakeClock(), 0)


@given(st.lists(st.tuples(st.sampled_from(["advance", "renew", "suspend", "reconnect", "lose"]),
                          st.floats(0, 3))))
def test_valid_only_while_leader_and_within_duration_of_the_last_proof(
    steps: list[tuple[str, float]],
) -> None:
    clock = FakeClock(0)
    lease = leader(clock, duration=2.0)
    last_proof, state = 0.0, LeaseState.LEADER
    for action, value in steps:
        if action == "advance":
            clock.advance(value)
        elif action == "renew":
            lease.renew(clock.monotonic())
            if state is LeaseState.LEADER:
                last_proof = clock.monotonic()
        elif action == "suspend":
            lease.suspend()
            state = LeaseState.SUSPENDED if state is LeaseState.LEADER else state
        elif action == "reconnect":
            owned = value > 1.5
            lease.reconnected(owned, clock.monotonic())
            if state is LeaseState.SUSPENDED:
                state = LeaseState.LEADER if owned else LeaseState.LOST
                last_proof = clock.monotonic() if owned else last_proof
        else:
            lease.lose()
            state = LeaseState.LOST
        expected = state is LeaseState.LEADER and clock.monotonic() - last_proof < 2.0
        assert lease.valid() == expected
        assert lease.state is state
