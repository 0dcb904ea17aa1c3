"""The in-memory source: tables as dicts and a commit-ordered log, with the connector roles
over it (log reader, chunk readers, watermark writer)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from dblog.core.dumps import ChunkPlan
from dblog.core.model import (
    ChangeEvent,
    ColumnInfo,
    Key,
    LogItem,
    Op,
    Row,
    TableId,
    TableInfo,
    Watermark,
)
from dblog.core.positions import Position, register_position
from dblog.engine.settings import PhaseHooks
from dblog.errors import DumpRequestError
from dblog.spi import Chunk, Finding


@dataclass
class MemoryTable:
    info: TableInfo
    rows: dict[Key, Row] = field(default_factory=dict)


class MemoryDatabase:
    """Tables plus a commit-ordered log. Positions are :class:`LogOffset` values counting log
    entries."""

    def __init__(self) -> None:
        self.tables: dict[TableId, MemoryTable] = {}
        self.log: list[LogItem] = []
        self.lock = threading.Lock()
        self._xid = 0

    def create_table(self, name: str, columns: Sequence[str], key: Sequence[str]) -> TableId:
        table = TableId.parse(name)
        info = TableInfo(table, tuple(ColumnInfo(c, "any") for c in columns), tuple(key))
        self.tables[table] = MemoryTable(info)
        return table

    def _append(self, item: ChangeEvent | Watermark) -> None:
        position = LogOffset(len(self.log) + 1)
        if isinstance(item, Watermark):
            self.log.append(Watermark(item.value, position))
        else:
            item.position = position
            self.log.append(item)

    def transaction(self, changes: Iterable[tuple[str, TableId, Row]]) -> None:
        """Apply ``(op, table, row)`` changes atomically; op is insert|update|delete|upsert.
        An update row may carry ``"__old_key__"`` to change the key."""
        with self.lock:
            self._xid += 1
            self._append(ChangeEvent(Op.BEGIN, None, txid=self._xid))
            for op, table, row in changes:
                self._apply(op, table, dict(row))
            self._append(ChangeEvent(Op.COMMIT, None, txid=self._xid))

    def _apply(self, op: str, table: TableId, row: Row) -> None:
        mem = self.tables[table]
        key_cols = mem.info.key_columns
        old_key = row.pop("__old_key__", None)
        key = tuple(row[c] for c in key_cols)
        if op == "delete":
            before = mem.rows.pop(key, None)
            if before is not None:
                self._append(ChangeEvent(Op.DELETE, table, key, before=before, txid=self._xid))
            return
        previous_key = tuple(old_key) if old_key is not None else key
        before = mem.rows.pop(previous_key, None)
        if op == "update" and before is None:
            return
        mem.rows[key] = row
        event_op = Op.INSERT if before is None else Op.UPDATE
        self._append(ChangeEvent(event_op, table, key, before=before, after=dict(row),
                                 old_key=previous_key if previous_key != key else None,
                                 txid=self._xid))

    def truncate(self, table: TableId) -> None:
        with self.lock:
            self._xid += 1
            self._append(ChangeEvent(Op.BEGIN, None, txid=self._xid))
            self.tables[table].rows.clear()
            self._append(ChangeEvent(Op.TRUNCATE, table, txid=self._xid))
            self._append(ChangeEvent(Op.COMMIT, None, txid=self._xid))

    def watermark(self, value: str) -> None:
        with self.lock:
            self._xid += 1
            self._append(ChangeEvent(Op.BEGIN, None, txid=self._xid))
            self._append(Watermark(value))
            self._append(ChangeEvent(Op.COMMIT, None, txid=self._xid))


class LogOffset(int):
    """The memory source's position: the number of log entries handed out (ordered as ints)."""

    __slots__ = ()
    kind: ClassVar[str] = "offset"

    @classmethod
    def parse(cls, text: str) -> LogOffset:
        return cls(int(text))

    def encode(self) -> str:
        return f"{self.kind}:{int(self)}"


register_position(LogOffset.kind, LogOffset.parse)


class MemoryLogReader:
    def __init__(self, db: MemoryDatabase, max_batch: int = 64) -> None:
        self.db = db
        self.max_batch = max_batch
        self.offset = 0
        self.acknowledged: Position | None = None

    def start(self, position: Position | None) -> None:
        self.offset = int(position) if isinstance(position, LogOffset) else 0

    def poll(self, timeout: float) -> list[LogItem]:
        with self.db.lock:
            items = self.db.log[self.offset : self.offset + self.max_batch]
        self.offset += len(items)
        return [_copy(i) for i in items]

    def acknowledge(self, position: Position) -> None:
        self.acknowledged = position

    def close(self) -> None:
        pass


def _copy(item: LogItem) -> LogItem:
    if isinstance(item, Watermark):
        return item
    return ChangeEvent(item.op, item.table, item.key, item.before, item.after, item.position,
                       item.txid, item.commit_ts, item.old_key, item.unchanged)


class MemoryChunkReader:
    def __init__(self, db: MemoryDatabase) -> None:
        self.db = db

    def list_tables(self) -> list[TableId]:
        return sorted(self.db.tables)

    def table_info(self, table: TableId, key_columns: Sequence[str] | None = None) -> TableInfo:
        if table not in self.db.tables:
            raise DumpRequestError(f"unknown table {table}")
        return self.db.tables[table].info

    def _sorted(self, info: TableInfo) -> list[tuple[Key, Row]]:
        return sorted((k, dict(r)) for k, r in self.db.tables[info.table].rows.items())

    def max_key(self, info: TableInfo) -> Key | None:
        with self.db.lock:
            rows = self._sorted(info)
        return rows[-1][0] if rows else None

    def read_chunk(self, info: TableInfo, after: Key | None, upper: Key | None,
                   limit: int, inclusive: bool = False) -> Chunk:
        with self.db.lock:
            rows = self._sorted(info)
        picked = [(k, r) for k, r in rows
                  if (after is None or k > after or (inclusive and k == after))
                  and (upper is None or k <= upper)]
        return Chunk(picked[:limit])

    def read_keys(self, info: TableInfo, keys: Sequence[Key]) -> Chunk:
        wanted = set(keys)
        with self.db.lock:
            return Chunk([(k, r) for k, r in self._sorted(info) if k in wanted])

    def parse_key(self, info: TableInfo, values: Sequence[object]) -> Key:
        if len(values) != len(info.key_columns):
            raise DumpRequestError(f"a key of {info.table} has {len(info.key_columns)} values")
        return tuple(values)

    def close(self) -> None:
        pass


class MemoryPendingWindow:
    """A window whose L, SELECT and H already ran; its chunk shows after ``delay`` collects
    (the results of a real source arrive some time after the statements were sent)."""

    _ready_fd: int | None = None

    def __init__(self, chunk: Chunk, delay: int) -> None:
        self.chunk, self.delay = chunk, delay

    def fileno(self) -> int:
        if MemoryPendingWindow._ready_fd is None:  # an always-readable pipe, to wait on
            read_fd, write_fd = os.pipe()
            os.write(write_fd, b"x")
            MemoryPendingWindow._ready_fd = read_fd
        return MemoryPendingWindow._ready_fd

    def collect(self) -> Chunk | None:
        if self.delay > 0:
            self.delay -= 1
            return None
        return self.chunk


class MemoryWindowChunkReader(MemoryChunkReader):
    """A :class:`MemoryChunkReader` that is also a :class:`dblog.spi.WindowChunkReader`."""

    def __init__(self, db: MemoryDatabase, delay: int = 2,
                 hooks: PhaseHooks | None = None) -> None:
        super().__init__(db)
        self.delay = delay
        self.hooks = hooks or PhaseHooks()
        """Called by the source itself (concurrent writers), right after L and before H."""
        self.started: list[ChunkPlan] = []

    @property
    def writes_windows(self) -> bool:
        return True

    def start_chunk_window(self, low: str, high: str, info: TableInfo, after: Key | None,
                           upper: Key | None, limit: int,
                           inclusive: bool = False) -> MemoryPendingWindow:
        plan = ChunkPlan("", info.table, after=after, upper=upper, inclusive=inclusive)
        self.started.append(plan)
        self.db.watermark(low)
        if self.hooks.after_low:
            self.hooks.after_low(plan)
        chunk = self.read_chunk(info, after, upper, limit, inclusive)
        if self.hooks.before_high:
            self.hooks.before_high(plan)
        self.db.watermark(high)
        return MemoryPendingWindow(chunk, self.delay)


class MemoryWatermarkWriter:
    def __init__(self, db: MemoryDatabase) -> None:
        self.db = db

    def write(self, value: str) -> None:
        self.db.watermark(value)

    def close(self) -> None:
        pass


class MemoryConnector:
    """A :class:`dblog.spi.SourceConnector` over a :class:`MemoryDatabase`."""

    def __init__(self, db: MemoryDatabase, instance: str = "test") -> None:
        self.db = db
        self.instance = instance

    def prepare(self) -> None:
        pass

    def check(self) -> list[Finding]:
        return [Finding("ok", f"memory source with {len(self.db.tables)} table(s)")]

    def log_reader(self) -> MemoryLogReader:
        return MemoryLogReader(self.db)

    def chunk_reader(self) -> MemoryChunkReader:
        return MemoryChunkReader(self.db)

    def watermark_writer(self) -> MemoryWatermarkWriter:
        return MemoryWatermarkWriter(self.db)

    def close(self) -> None:
        pass
