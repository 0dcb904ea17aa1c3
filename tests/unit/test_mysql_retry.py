"""The connector's reconnect backoff runs on the injected clock and gives up after its budget."""

from __future__ import annotations

import itertools

import pytest

from dblog.connectors.mysql.retry import with_backoff
from dblog.errors import FatalSourceError, RetryableSourceError
from dblog.testing import FakeClock


def test_retries_with_doubling_delays_until_the_step_succeeds() -> None:
    clock, calls = FakeClock(), []

    def step() -> str:
        calls.append(clock.monotonic())
        if len(calls) < 5:
            raise RetryableSourceError("server has gone away")
        return "connected"

    assert with_backoff(step, clock, 60, "connecting") == "connected"
    assert calls == pytest.approx([0.0, 0.2, 0.6, 1.4, 3.0])


def test_gives_up_after_the_budget_and_never_retries_fatal_errors() -> None:
    clock, calls = FakeClock(), []

    def down() -> None:
        calls.append(clock.monotonic())
        raise RetryableSourceError("connection refused")

    with pytest.raises(RetryableSourceError):
        with_backoff(down, clock, 30, "connecting")
    assert calls[-1] <= 30 and clock.monotonic() <= 30 and len(calls) > 5
    assert max(b - a for a, b in itertools.pairwise(calls)) == pytest.approx(5.0)

    fatal_calls: list[float] = []

    def denied() -> None:
        fatal_calls.append(clock.monotonic())
        raise FatalSourceError("access denied")

    with pytest.raises(FatalSourceError):
        with_backoff(denied, clock, 30, "connecting")
    assert len(fatal_calls) == 1
