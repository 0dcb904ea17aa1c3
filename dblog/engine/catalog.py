"""Table metadata for outputs: a format that writes columns, types or key names (debezium-json,
canal-json, replica tables) asks for a table's :class:`~dblog.core.model.TableInfo` while it
encodes, on the output's own thread.

The lookup reads the source's catalog through a chunk reader of its own (a connection that no
other thread uses), once per table, under a lock (outputs call it from their threads). A
schema change seen in the log drops the table's entry, so the next lookup reads it again; a
format that meets a column the entry lacks (PostgreSQL logs no schema changes) asks for
:meth:`TableCatalog.refresh`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from dblog.core.model import TableId, TableInfo
from dblog.errors import DblogError
from dblog.spi import ChunkReader

log = logging.getLogger("dblog.engine")


class TableCatalog:
    def __init__(self, open_reader: Callable[[], ChunkReader]) -> None:
        self._open_reader = open_reader
        self._reader: ChunkReader | None = None
        self._tables: dict[TableId, TableInfo | None] = {}
        self._lock = threading.Lock()

    def lookup(self, table: TableId) -> TableInfo | None:
        """The table's metadata (None when the source cannot give it: no such table)."""
        with self._lock:
            if table not in self._tables:
                self._tables[table] = self._read(table)
            return self._tables[table]

    def _read(self, table: TableId) -> TableInfo | None:
        if self._reader is None:
            self._reader = self._open_reader()
        try:
            return self._reader.table_info(table)
        except DblogError as exc:
            if exc.retryable:
                raise
            log.warning("no metadata for %s: %s", table, exc.message)
            return None

    __call__ = lookup

    def refresh(self, table: TableId) -> TableInfo | None:
        """The table's metadata read again (a format met a column the cached one lacks;
        :class:`~dblog.formats.schema.RefreshableLookup`)."""
        with self._lock:
            self._tables[table] = self._read(table)
            return self._tables[table]

    def invalidate(self, table: TableId) -> None:
        with self._lock:
            self._tables.pop(table, None)

    def close(self) -> None:
        with self._lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
