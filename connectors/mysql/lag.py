"""The binlog distance behind the server's head: the lag in bytes of a MySQL or MariaDB source.

A GTID names a transaction, not a place in the binlog, and the server has no function from one
to the other; the log reader knows where each commit it hands out ends (file, offset), and the
committed position carries it (:class:`dblog.spi.LocatedPosition`). The distance from there to
the server's head is the rest of that file plus every later file, as ``SHOW BINARY LOGS``
lists their sizes (the current file's size is where the server writes next).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from dblog.errors import DblogError

from .db import connect, parse_dsn, query


def binlog_distance(logs: Sequence[tuple[str, int]], file: str, offset: int) -> int | None:
    """Bytes from ``offset`` of ``file`` to the end of the last of ``logs`` (name and size of
    each binlog, oldest first); None when ``file`` is not among them (purged)."""
    for index, (name, size) in enumerate(logs):
        if name == file:
            return max(0, size - offset) + sum(size for _, size in logs[index + 1:])
    return None


class BinlogHead:
    """Reads the binlog sizes on a connection of its own (opened on first use, again after a
    failure). Needs BINLOG MONITOR (MariaDB) or REPLICATION CLIENT, which dblog needs anyway."""

    def __init__(self, dsn: str) -> None:
        self.endpoint = parse_dsn(dsn)
        self._conn: Any = None

    def logs(self) -> list[tuple[str, int]]:
        """Name and size of each binlog, oldest first; raises a DblogError (and closes the
        connection, so the next call opens a new one) when the server cannot tell."""
        try:
            if self._conn is None:
                self._conn = connect(self.endpoint, "connecting for the lag in bytes")
            rows = query(self._conn, "SHOW BINARY LOGS", doing="listing the binary logs")
        except DblogError:
            self.close()
            raise
        return [(str(row[0]), int(row[1])) for row in rows]

    def distance(self, location: tuple[str, int]) -> int | None:
        return binlog_distance(self.logs(), *location)

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # closing a dead connection may fail again
                self._conn.close()
            self._conn = None
