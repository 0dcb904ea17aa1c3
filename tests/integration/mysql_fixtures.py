"""MariaDB for integration tests: one server per session from the Debian package (harness), a
fresh database per test. Where a Docker engine is reachable (``DBLOG_HARNESS``, see
dblog/harness/containers.py) the server is a container of ``DBLOG_MYSQL_IMAGE`` instead
(``mariadb:10.11`` by default; ``mysql:8.4`` runs these suites against MySQL 8).
``DBLOG_MYSQL_DSN`` (``mysql://user:password@host:port/``) points the tests at an existing
MariaDB or MySQL 8 with ROW/FULL/FULL-metadata binlogs instead of either."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from dblog.harness.containers import MysqlContainer, choose_path, mysql_image, start_mysql
from dblog.harness.postgres import HarnessError
from tests.conftest import unavailable

if TYPE_CHECKING:
    from dblog.harness.mariadb import MariadbServer


@pytest.fixture(scope="session")
def maria_admin_dsn() -> Iterator[str]:
    path = choose_path("DBLOG_MYSQL_DSN")
    if path == "external":
        yield os.environ["DBLOG_MYSQL_DSN"].rstrip("/") + "/"
        return
    server: MariadbServer | MysqlContainer
    try:
        from dblog.harness.mariadb import start_mariadb

        server = start_mysql(mysql_image()) if path == "containers" else start_mariadb()
    except (ImportError, HarnessError, FileNotFoundError, KeyError) as exc:
        what = f"MySQL/MariaDB ({mysql_image()} container)" if path == "containers" else "MariaDB"
        unavailable(what, str(exc))
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
