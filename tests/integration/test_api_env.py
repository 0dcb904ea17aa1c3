"""Shared set-up of the API tests (no tests here): a database of its own, a running pipeline
and its API server, made once per test module."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from dblog.api.config import ApiConfig
from dblog.api.server import ApiServer
from dblog.app.pipeline import Pipeline
from dblog.connectors.postgres import PostgresConnector
from dblog.core.model import ChangeEvent
from dblog.engine import EngineSettings
from dblog.outputs.jsonl import JsonlOutput
from dblog.spi import EncodedBatch

from .conftest import _drop_slot, _with_dbname
from .pgutil import wait_until

TOKEN = "s3cret-token"


@dataclass
class Env:
    dsn: str
    pipeline: Pipeline
    server: ApiServer
    tmp: Path
    clients: dict[str | None, httpx.Client] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.server.url

    def client(self, token: str | None = TOKEN) -> httpx.Client:
        """A client sending ``token`` (kept open until the module's server stops)."""
        if token not in self.clients:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            self.clients[token] = httpx.Client(base_url=self.url, headers=headers, timeout=30)
        return self.clients[token]

    def close(self) -> None:
        for client in self.clients.values():
            client.close()

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql, params)

    def count(self, table: str) -> int:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            assert row is not None
            return int(row[0])


@contextmanager
def database(admin_dsn: str) -> Iterator[str]:
    name = f"api_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_dbname(admin_dsn, name)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            slots = admin.execute("SELECT slot_name FROM pg_replication_slots "
                                  "WHERE database = %s", (name,)).fetchall()
            for (slot,) in slots:
                _drop_slot(admin, slot)
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def create_tables(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t_int (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO t_int SELECT g, 'init' || g FROM generate_series(1, %s) g",
                     (rows,))
        conn.execute("CREATE TABLE t_comp (a int, b text, v text, PRIMARY KEY (a, b))")
        conn.execute("INSERT INTO t_comp SELECT g % 10, 'k' || g, 'x' FROM "
                     "generate_series(1, 100) g")
        conn.execute("ANALYZE")


class GatedOutput(JsonlOutput):
    """A jsonl output whose writes wait while its gate is closed (a stalled output)."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.gate = threading.Event()
        self.gate.set()

    def write(self, events: Sequence[ChangeEvent]) -> None:
        self.gate.wait(120)
        super().write(events)

    def write_encoded(self, batch: EncodedBatch) -> None:
        """What an output thread calls (the engine encodes: PreEncodingOutput)."""
        self.gate.wait(120)
        super().write_encoded(batch)


@contextmanager
def running(admin_dsn: str, tmp: Path, rows: int = 20_000,
            settings: EngineSettings | None = None,
            output: JsonlOutput | None = None) -> Iterator[Env]:
    """A pipeline on a fresh database with ``rows`` rows in t_int, and its API (token set)."""
    import os

    os.environ["DBLOG_TEST_API_TOKEN"] = TOKEN
    with database(admin_dsn) as dsn:
        create_tables(dsn, rows)
        slot = "api_" + dsn.rsplit("dbname=", 1)[-1].split()[0].lower()
        settings = settings or EngineSettings(chunk_size=200, flush_interval_s=0.2,
                                              heartbeat_interval_s=0.5)
        pipeline = Pipeline(PostgresConnector({"dsn": dsn, "slot": slot,
                                               "tables": ["public.*"]}, "api"),
                            [output or JsonlOutput({"path": str(tmp / "out.jsonl")})],
                            state_path=str(tmp / "state.json"), settings=settings).start()
        server = ApiServer(pipeline, ApiConfig(token_env="DBLOG_TEST_API_TOKEN"),
                           instance="test").start()
        env = Env(dsn, pipeline, server, tmp)
        try:
            wait_until(lambda: env.client().get("/readyz").status_code == 200, 30,
                       "the API to be ready")
            yield env
        finally:
            env.close()
            server.stop()
            pipeline.stop()


def wait_dump(env: Env, dump_id: str, states: tuple[str, ...], timeout: float = 60
              ) -> dict[str, Any]:
    client = env.client()
    deadline = time.monotonic() + timeout
    while True:
        view: dict[str, Any] = client.get(f"/api/v1/dumps/{dump_id}").json()
        if view["state"] in states:
            return view
        if time.monotonic() > deadline:
            raise AssertionError(f"dump {dump_id} stayed {view['state']}, not {states}")
        time.sleep(0.1)
