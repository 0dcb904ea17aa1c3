"""Lag in bytes where the source can tell: PostgreSQL's WAL between ``pg_current_wal_lsn()``
and the committed position (what the slot is confirmed up to). Other sources: None.

The figure comes from a connection of the API's own (the engine's connections belong to its
thread); it is read at most once a second, however many clients ask.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

MAX_AGE_S = 1.0


class PostgresLagBytes:
    def __init__(self, dsn: str, committed: Callable[[], str | None]) -> None:
        self.dsn, self.committed = dsn, committed
        self._conn: Any = None
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


def lag_bytes_probe(source: dict[str, Any],
                    committed: Callable[[], str | None]) -> PostgresLagBytes | None:
    """The probe for a source section of the configuration (None: the source cannot tell)."""
    if source.get("type", "postgres") == "postgres" and isinstance(source.get("dsn"), str):
        return PostgresLagBytes(source["dsn"], committed)
    return None
