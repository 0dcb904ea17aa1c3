"""Connections for SQL work (catalog, chunks, watermarks): mysqlclient when installed (its C
row parsing is several times faster), PyMySQL otherwise."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from .errors import classify

try:
    import MySQLdb as _driver  # mysqlclient

    DRIVER = "mysqlclient"
except ImportError:  # pragma: no cover - depends on the installed extra
    import pymysql as _driver

    DRIVER = "pymysql"

DriverError: type[Exception] = _driver.Error


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    database: str

    def replication_settings(self) -> dict[str, Any]:
        """mysql-replication's connection settings."""
        return {"host": self.host, "port": self.port, "user": self.user,
                "password": self.password, "charset": "utf8mb4"}


def parse_dsn(dsn: str) -> Endpoint:
    """``mysql://user:password@host:port/database`` (database optional)."""
    parts = urlsplit(dsn)
    if parts.scheme not in ("mysql", "mariadb") or not parts.hostname:
        raise ValueError("write mysql://user:password@host:port/ (database optional)")
    return Endpoint(parts.hostname, parts.port or 3306, unquote(parts.username or "root"),
                    unquote(parts.password or ""), parts.path.lstrip("/"))


def connect(endpoint: Endpoint, doing: str = "connecting to the source") -> Any:
    """An autocommit connection with UTC session time and utf8mb4."""
    kwargs: dict[str, Any] = {"host": endpoint.host, "port": endpoint.port,
                              "user": endpoint.user, "charset": "utf8mb4",
                              "autocommit": True, "connect_timeout": 10}
    kwargs["passwd" if DRIVER == "mysqlclient" else "password"] = endpoint.password
    if endpoint.database:
        kwargs["db" if DRIVER == "mysqlclient" else "database"] = endpoint.database
    try:
        conn = _driver.connect(**kwargs)
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
    except DriverError as exc:
        raise classify(exc, doing) from exc
    return conn


def alive(conn: Any) -> bool:
    """Whether a connection still answers (a server restart leaves it dead)."""
    try:
        conn.ping()
    except Exception:  # any failure means: open a new one
        return False
    return True


def query(conn: Any, sql: str, params: Any = None, doing: str = "querying the source"
          ) -> list[tuple[Any, ...]]:
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall())
    except DriverError as exc:
        raise classify(exc, doing) from exc


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
