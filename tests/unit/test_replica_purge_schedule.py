"""Unit tests of :class:`dblog.replica.PurgeSchedule`: when a replica output purges tombstones
and below which guard, on an injected clock."""

from __future__ import annotations

import pytest

from dblog.connectors.postgres.positions import Lsn
from dblog.errors import StateError
from dblog.replica import POSTGRES, PurgeSchedule, purge_bound
from dblog.spi import Checkpoint

AT = Lsn(0x16_0000_1000)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def at(position: object) -> Checkpoint:
    return Checkpoint("p", 1, {"seq": 9, "position": position})


def test_the_bound_is_the_purge_bound_of_the_checkpoints_position_once_the_interval_passed(
        ) -> None:
    clock = FakeClock()
    schedule = PurgeSchedule(margin=64, interval_s=600.0, clock=clock)
    assert schedule.bound(at(AT.encode())) is None  # the interval starts at creation
    clock.now += 600
    assert schedule.bound(at(AT.encode())) == purge_bound(POSTGRES, AT, 64)


def test_no_purge_without_a_margin_a_checkpoint_or_its_position() -> None:
    clock = FakeClock()
    clock.now += 10_000
    assert PurgeSchedule(None, 0.0, clock).bound(at(AT.encode())) is None
    schedule = PurgeSchedule(64, 0.0, clock)
    assert schedule.bound(None) is None
    assert schedule.bound(at(None)) is None
    assert schedule.bound(at(12)) is None  # not an encoded position


def test_the_interval_restarts_only_when_purged() -> None:
    """A purge that failed (purged not called) is tried again at the next commit."""
    clock = FakeClock()
    schedule = PurgeSchedule(64, 600.0, clock)
    clock.now += 600
    assert schedule.bound(at(AT.encode())) is not None
    assert schedule.bound(at(AT.encode())) is not None
    schedule.purged()
    assert schedule.bound(at(AT.encode())) is None
    clock.now += 599
    assert schedule.bound(at(AT.encode())) is None
    clock.now += 1
    assert schedule.bound(at(AT.encode())) is not None


def test_the_position_is_decoded_only_when_a_purge_is_due() -> None:
    clock = FakeClock()
    schedule = PurgeSchedule(64, 600.0, clock)
    assert schedule.bound(at("nosuchkind:1")) is None  # not due: not decoded
    clock.now += 600
    with pytest.raises(StateError, match="nosuchkind"):
        schedule.bound(at("nosuchkind:1"))
