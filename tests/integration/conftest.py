"""Real servers for integration tests, started by the harness on free loopback ports, or in
Docker containers where an engine is reachable (``DBLOG_HARNESS``: auto, binaries, containers).

``DBLOG_PG_DSN`` points the tests at an existing PostgreSQL (wal_level=logical, wal2json)
instead; each test still works in a database of its own.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import psycopg
import pytest

from dblog.harness.containers import (
    KafkaContainer,
    PostgresContainer,
    choose_path,
    start_kafka_container,
    start_postgres_container,
)
from dblog.harness.postgres import HarnessError, PostgresServer, start_postgres
from tests.conftest import unavailable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def pg_admin_dsn() -> Iterator[str]:
    """``DBLOG_PG_DSN``, else a throwaway server: a container when the harness takes the
    containers path (``DBLOG_HARNESS``, dblog/harness/containers.py), else the binaries."""
    path = choose_path("DBLOG_PG_DSN")
    if path == "external":
        yield os.environ["DBLOG_PG_DSN"]
        return
    server: PostgresServer | PostgresContainer | None = None
    try:
        server = start_postgres_container() if path == "containers" else start_postgres()
    except (HarnessError, FileNotFoundError, KeyError) as exc:
        unavailable("PostgreSQL", str(exc))
    assert server is not None
    try:
        yield server.dsn()
    finally:
        server.stop()


@pytest.fixture()
def pg_dsn(pg_admin_dsn: str) -> Iterator[str]:
    """A fresh database per test; its replication slots are dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    dsn = _with_dbname(pg_admin_dsn, name)
    yield dsn
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        slots = admin.execute("SELECT slot_name FROM pg_replication_slots WHERE database = %s",
                              (name,)).fetchall()
        for (slot,) in slots:
            _drop_slot(admin, slot)
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _drop_slot(admin: psycopg.Connection, slot: str) -> None:
    """Terminate the slot's walsender and drop the slot once it is inactive (the walsender of
    a just-closed connection can take a moment to exit)."""
    deadline = time.monotonic() + 30
    while True:
        admin.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                      "WHERE slot_name = %s AND active_pid IS NOT NULL", (slot,))
        try:
            admin.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            return
        except psycopg.errors.ObjectInUse:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _with_dbname(dsn: str, name: str) -> str:
    parts = [p for p in dsn.split() if not p.startswith("dbname=")]
    return " ".join([*parts, f"dbname={name}"])


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """One Kafka broker for the session: ``DBLOG_KAFKA_BOOTSTRAP`` (host:port[,...]) or a
    throwaway KRaft node from the harness (jars fetched by scripts/setup.sh). Tests share it,
    so each one uses topics and transactional ids of its own. On the containers path
    (``DBLOG_HARNESS``) the node runs in an apache/kafka container instead."""
    path = choose_path("DBLOG_KAFKA_BOOTSTRAP")
    if path == "external":
        yield os.environ["DBLOG_KAFKA_BOOTSTRAP"]
        return
    from dblog.harness.kafka import KafkaCluster, start_kafka

    cluster: KafkaCluster | KafkaContainer
    try:
        cluster = start_kafka_container() if path == "containers" else start_kafka()
    except (HarnessError, OSError) as exc:
        unavailable("Kafka", str(exc))
    try:
        yield cluster.bootstrap
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def spark_session(request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """One local Spark session per test module (it takes seconds to start), with the Delta and
    Kafka connector jars that scripts/setup.sh fetched. Its start time is written to the
    terminal, as the Spark issue asks it reported."""
    from dblog.harness.spark import local_spark_session

    started = time.monotonic()
    try:
        session = local_spark_session(app_name="dblog-tests",
                                      warehouse=tmp_path_factory.mktemp("spark-warehouse"))
    except (HarnessError, OSError) as exc:
        unavailable("Spark", str(exc))
    elapsed = time.monotonic() - started
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"\nspark_session: started in {elapsed:.1f} s for "
                                f"{request.module.__name__}")
    try:
        yield session
    finally:
        session.stop()


from tests.integration.mysql_fixtures import maria_admin_dsn, maria_dsn  # noqa: E402, F401
