"""Lag in bytes where the source can tell:

* PostgreSQL: the WAL between ``pg_current_wal_lsn()`` and the committed position (what the
  slot is confirmed up to);
* MySQL and MariaDB: the binlog between the committed position's location (the file and offset
  where its transaction ends, as the log reader saw it: :class:`dblog.spi.LocatedPosition`)
  and the end of the server's last binlog (``SHOW BINARY LOGS``). None until the first commit
  of this run, since a GTID position read back from the state store has no location.

Other sources: None. The figure comes from a connection of the API's own (the engine's
connections belong to its thread); it is read at most once a second, however many clients ask.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger("dblog.api")
MAX_AGE_S = 1.0

Status = Callable[[], Mapping[str, Any]]


class LagBytesProbe:
    """The figure, read again by :meth:`_read` when the last one is older than a second."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: tuple[float, int | None] = (0.0, None)

    def __call__(self) -> int | None:
        with self._lock:
            at, value = self._last
            if time.monotonic() - at < MAX_AGE_S:
                return value
            value = self._read()
            self._last = (time.monotonic(), value)
            return value

    def _read(self) -> int | None:
        raise NotImplementedError

    def close(self) -> None: ...


class PostgresLagBytes(LagBytesProbe):
    def __init__(self, dsn: str, committed: Callable[[], str | None]) -> None:
        super().__init__()
        self.dsn, self.committed = dsn, committed
        self._conn: Any = None

    def _read(self) -> int | None:
        import psycopg

        position = self.committed()
        if position is None:
            return None
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=5,
                                             application_name="dblog-api")
            row = self._conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), "
                                     "%s::pg_lsn)::bigint", (position,)).fetchone()
        except psycopg.Error:
            self.close()
            return None
        return None if row is None or row[0] is None else max(0, int(row[0]))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class BinlogLagBytes(LagBytesProbe):
    def __init__(self, dsn: str, located: Callable[[], tuple[str, int] | None]) -> None:
        from dblog.connectors.mysql.lag import BinlogHead

        super().__init__()
        self.located, self.head = located, BinlogHead(dsn)
        self._warned = False

    def _read(self) -> int | None:
        from dblog.errors import DblogError

        location = self.located()
        if location is None:
            return None
        try:
            distance = self.head.distance(location)
        except DblogError as exc:
            if not self._warned:  # once: a missing right would repeat it every second
                log.warning("lag in bytes unknown: %s", exc)
                self._warned = True
            return None
        self._warned = False
        return distance

    def close(self) -> None:
        self.head.close()


def committed_position(status: Mapping[str, Any]) -> str | None:
    position = status.get("committed_position")
    return None if position is None else str(position)


def committed_location(status: Mapping[str, Any]) -> tuple[str, int] | None:
    """The engine's ``committed_location`` (file and offset), or None."""
    location = status.get("committed_location")
    if not isinstance(location, Mapping):
        return None
    return str(location["file"]), int(location["offset"])


def lag_bytes_probe(source: Mapping[str, Any], status: Status) -> LagBytesProbe | None:
    """The probe for a source section of the configuration, reading the committed position
    from ``status`` (``Control.status``); None: the source cannot tell."""
    kind, dsn = source.get("type", "postgres"), source.get("dsn")
    if not isinstance(dsn, str):
        return None
    if kind == "postgres":
        return PostgresLagBytes(dsn, lambda: committed_position(status()))
    if kind in ("mysql", "mariadb"):
        return BinlogLagBytes(dsn, lambda: committed_location(status()))
    return None
