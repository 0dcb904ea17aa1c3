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


def test_check_reports_an_unreachable_server_at_once_without_the_reconnect_budget() -> None:
    """``dblog check`` answers at once; only a running pipeline rides out a server restart
    (before, check waited out reconnect_timeout_s, 120 s by default, on the backoff)."""
    import socket

    from dblog.connectors.mysql import MysqlConnector
    from dblog.errors import DblogError

    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    clock = FakeClock()
    connector = MysqlConnector({"type": "mariadb", "dsn": f"mysql://dblog@127.0.0.1:{port}/",
                                "server_id": 4242, "tables": ["shop.*"]}, clock=clock)
    with pytest.raises(DblogError) as caught:
        connector.check()
    assert clock.monotonic() == 0.0, f"check waited {clock.monotonic()} s on the backoff"
    assert caught.value.retryable and caught.value.fix and "source.dsn" in caught.value.fix
