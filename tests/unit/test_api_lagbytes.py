"""The API's lag-in-bytes probes (dblog/api/lagbytes.py): which source gets which probe, the
committed location they read from the engine's status, at most one read a second, and None
when the figure is unknown."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from dblog.api.lagbytes import (
    BinlogLagBytes,
    PostgresLagBytes,
    committed_location,
    lag_bytes_probe,
)
from dblog.connectors.mysql.positions import BinlogPosition, MariadbGtid
from dblog.connectors.postgres.positions import Lsn
from dblog.core.acks import PipelineState
from dblog.engine import Engine
from dblog.testing import ListOutput, MemoryConnector, MemoryDatabase, MemoryStateStore

NOWHERE = "mysql://dblog:secret@127.0.0.1:1/"  # nothing listens on port 1


def test_the_engine_status_carries_the_committed_location_when_the_position_knows_it() -> None:
    engine = Engine(MemoryConnector(MemoryDatabase()), [ListOutput()], MemoryStateStore())
    gtid = MariadbGtid.parse("0-1-42")
    expected: list[tuple[Any, tuple[str, int] | None]] = [
        (gtid.at("bin.000004", 8_192), ("bin.000004", 8_192)),
        (gtid, None),  # read back from the state store: no location
        (BinlogPosition("bin.000002", 77), ("bin.000002", 77)),
        (Lsn(0x1000), None),
        (None, None)]
    for position, location in expected:
        engine.delivery.state = PipelineState(position=position)
        status = engine.status()
        assert committed_location(status) == location, position
        assert status["committed_position"] == (None if position is None else str(position))


def test_each_source_type_gets_its_probe() -> None:
    def status() -> dict[str, Any]:
        return {}

    assert isinstance(lag_bytes_probe({"type": "postgres", "dsn": "host=x"}, status),
                      PostgresLagBytes)
    assert isinstance(lag_bytes_probe({"dsn": "host=x"}, status), PostgresLagBytes)
    for kind in ("mysql", "mariadb"):
        assert isinstance(lag_bytes_probe({"type": kind, "dsn": NOWHERE}, status),
                          BinlogLagBytes)
    assert lag_bytes_probe({"type": "memory", "dsn": "x"}, status) is None
    assert lag_bytes_probe({"type": "mariadb"}, status) is None


def test_no_location_no_figure_and_at_most_one_read_a_second() -> None:
    reads: list[int] = []

    def status() -> dict[str, Any]:
        reads.append(1)
        return {"committed_position": "0-1-5", "committed_location": None}

    probe = lag_bytes_probe({"type": "mariadb", "dsn": NOWHERE}, status)
    assert probe is not None
    assert [probe() for _ in range(5)] == [None] * 5
    assert len(reads) == 1  # without a location the server is not asked either
    probe.close()


def test_an_unreachable_server_gives_none_and_one_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    probe = BinlogLagBytes(NOWHERE, lambda: ("bin.000001", 4))
    with caplog.at_level(logging.WARNING, logger="dblog.api"):
        assert probe._read() is None and probe._read() is None
    warnings = [r.getMessage() for r in caplog.records if r.name == "dblog.api"]
    assert len(warnings) == 1 and warnings[0].startswith("lag in bytes unknown"), warnings
    assert "secret" not in warnings[0]
    probe.close()
