"""MariaDB for integration tests: one server per session from the Debian package (harness), a
fresh database per test. ``DBLOG_MYSQL_DSN`` (``mysql://user:password@host:port/``) points the
tests at an existing MariaDB or MySQL 8 with ROW/FULL/FULL-metadata binlogs instead."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import unavailable


@pytest.fixture(scope="session")
def maria_admin_dsn() -> Iterator[str]:
    external = os.environ.get("DBLOG_MYSQL_DSN")
    if external:
        yield external.rstrip("/") + "/"
        return
    try:
        from dblog.harness.mariadb import start_mariadb
        from dblog.harness.postgres import HarnessError

        server = start_mariadb()
    except (ImportError, HarnessError, FileNotFoundError, KeyError) as exc:
        unavailable("MariaDB", str(exc))
        return
    try:
        yield server.dsn()
    finally:
        server.stop()


def admin_connect(dsn: str, database: str = "") -> object:
    import pymysql

    from dblog.connectors.mysql.db import parse_dsn

    endpoint = parse_dsn(dsn)
    return pymysql.connect(host=endpoint.host, port=endpoint.port, user=endpoint.user,
                           password=endpoint.password, database=database or None,
                           autocommit=True, charset="utf8mb4")


@pytest.fixture()
def maria_dsn(maria_admin_dsn: str) -> Iterator[str]:
    """A fresh database per test (``mysql://.../<database>``)."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    conn = admin_connect(maria_admin_dsn)
    with conn.cursor() as cur:  # type: ignore[attr-defined]
        cur.execute(f"CREATE DATABASE `{name}`")
    yield maria_admin_dsn + name
    with conn.cursor() as cur:  # type: ignore[attr-defined]
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    conn.close()  # type: ignore[attr-defined]
