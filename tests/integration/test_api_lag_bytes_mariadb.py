"""Lag in bytes of a MariaDB source through the API and the Prometheus endpoint: near zero while
the capture keeps up, at least the binlog written since the output stalled while it is behind
(across a binlog rotation), and back near zero once it caught up."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dblog.api.config import ApiConfig
from dblog.api.lagbytes import lag_bytes_probe
from dblog.api.server import ApiServer
from dblog.app.pipeline import Pipeline
from dblog.connectors.mysql import MysqlConnector
from dblog.connectors.mysql.lag import binlog_distance
from dblog.engine import EngineSettings

from .pgutil import wait_until
from .sources import Kit
from .test_api_env import TOKEN, Env, GatedOutput
from .test_api_metrics import scrape
from .workload import maria_connect

pytestmark = pytest.mark.integration
NEAR = 1024  # a heartbeat transaction or two not committed yet


def binlogs(dsn: str) -> list[tuple[str, int]]:
    conn = maria_connect(dsn)
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        rows = [(str(r[0]), int(r[1])) for r in cur.fetchall()]
    conn.close()
    return rows


def lag_bytes(env: Env) -> float | None:
    return scrape(env).get(("dblog_lag_bytes", ()))


def near_zero(env: Env) -> bool:
    value = lag_bytes(env)
    return value is not None and value < NEAR


@pytest.fixture()
def env(maria_dsn: str, tmp_path: Path) -> Iterator[Env]:
    kit = Kit("mariadb", maria_dsn)
    kit.create_schema(200)
    config = kit.source_config("lagbytes")
    settings = EngineSettings(chunk_size=200, flush_interval_s=0.1, heartbeat_interval_s=0.5)
    pipeline = Pipeline(MysqlConnector(config, "lagbytes"),
                        [GatedOutput({"path": str(tmp_path / "out.jsonl")})],
                        state_path=str(tmp_path / "state.json"), settings=settings).start()
    os.environ["DBLOG_TEST_API_TOKEN"] = TOKEN
    probe = lag_bytes_probe(config, pipeline.status)
    server = ApiServer(pipeline, ApiConfig(token_env="DBLOG_TEST_API_TOKEN"), instance="test",
                       lag_bytes=probe).start()
    env = Env(maria_dsn, pipeline, server, tmp_path)
    try:
        yield env
    finally:
        env.close()
        server.stop()
        pipeline.stop()
        if probe is not None:
            probe.close()


def write_backlog(dsn: str, rounds: int) -> None:
    """Updates of every row of t_int, one transaction per round, with a binlog rotation
    half-way (the distance then spans files)."""
    conn = maria_connect(dsn)
    with conn.cursor() as cur:
        for n in range(rounds):
            if n == rounds // 2:
                cur.execute("FLUSH BINARY LOGS")
            cur.execute("UPDATE t_int SET ver = nextval(ver_seq), v = concat('r', %s, '-', id)",
                        (n,))
    conn.close()


def test_lag_bytes_grow_while_behind_and_return_near_zero(env: Env) -> None:
    output = env.pipeline.engine.delivery.outputs[0]
    assert isinstance(output, GatedOutput)
    wait_until(lambda: near_zero(env), 30, "lag in bytes near zero")
    output.gate.clear()
    try:
        committed = env.pipeline.status()["committed_location"]  # only moves on from here
        before = sum(size for _, size in binlogs(env.dsn))
        write_backlog(env.dsn, 20)
        logs = binlogs(env.dsn)
        written = sum(size for _, size in logs) - before
        assert written > 100_000, written  # 20 updates of 200 rows
        wait_until(lambda: (lag_bytes(env) or 0) >= written, 10, f">= {written} bytes behind")
        behind = lag_bytes(env)
        most = binlog_distance(binlogs(env.dsn), committed["file"], committed["offset"])
        assert behind is not None and most is not None and written <= behind <= most
        status: dict[str, Any] = env.client().get("/api/v1/status").json()
        assert status["lag_bytes"] is not None and status["lag_bytes"] >= written
        location = env.pipeline.status()["committed_location"]
        assert location["file"] < logs[-1][0], (location, logs)  # before the rotation
    finally:
        output.gate.set()
    wait_until(lambda: near_zero(env), 60, "lag in bytes back near zero")
    location = env.pipeline.status()["committed_location"]
    assert location["file"] == binlogs(env.dsn)[-1][0], location
