"""The source side: a connector and the three roles it builds (log reader, chunk reader,
watermark writer), with their optional abilities as checkable protocols."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from dblog.core.model import Key, LogItem, RowImage, TableId, TableInfo
from dblog.core.positions import Position
from dblog.spi.findings import Finding


@dataclass(frozen=True, slots=True)
class Chunk:
    """Rows of one chunk SELECT, in key order, plus the ids of transactions that were still in
    progress for the SELECT's snapshot. A transaction can reach the log before the low watermark
    yet be invisible to the SELECT (PostgreSQL writes the commit record a moment before the
    transaction becomes visible); its events must evict chunk rows like events inside the window.
    """

    rows: Sequence[tuple[Key, RowImage]]
    pending_txids: frozenset[int] = frozenset()
    logged_txids: frozenset[int] | None = None
    """Those pending transactions whose commit is already logged (committed, not yet visible);
    None when the source cannot tell."""


class LogReader(Protocol):
    """Tails the source's log from a position, yielding items in commit order."""

    def start(self, position: Position | None) -> None:
        """Begin reading after ``position`` (``None``: where the source's slot/cursor stands)."""

    def poll(self, timeout: float) -> Sequence[LogItem]:
        """Return the next items in log order, waiting at most ``timeout`` seconds for the first."""
        ...

    def acknowledge(self, position: Position) -> None:
        """Everything up to ``position`` is durable in every output; the source may discard it."""

    def close(self) -> None: ...


@runtime_checkable
class WakeableLogReader(Protocol):
    """An optional capability of a log reader: :meth:`wakeup` may be called from any thread
    and makes a :meth:`LogReader.poll` in progress (or the next one) return soon, with or
    without items. The engine calls it when a control command (a dump request, pause, stop)
    arrives, so the command does not wait for the poll timeout of an idle log."""

    def wakeup(self) -> None: ...


@runtime_checkable
class LocatedPosition(Protocol):
    """An optional ability of a position: where it lies in the source's log files, for the
    lag in bytes (the server's log end minus this). A binlog file and offset is its own
    location; a GTID position knows it only when the log reader that handed it out saw its
    commit (``None`` for one read back from the state store). No part of the position's
    identity, order or stored form."""

    @property
    def log_location(self) -> tuple[str, int] | None:
        """The log file and the offset where the position's transaction ends, or None."""
        ...


class ChunkReader(Protocol):
    """Reads table metadata and primary-key chunks from the source (step 3 of the algorithm)."""

    def list_tables(self) -> list[TableId]: ...

    def table_info(self, table: TableId, key_columns: Sequence[str] | None = None) -> TableInfo:
        """Columns and key of ``table``; raises DumpRequestError if unknown or without a key."""
        ...

    def max_key(self, info: TableInfo) -> Key | None: ...

    def read_chunk(
        self, info: TableInfo, after: Key | None, upper: Key | None, limit: int,
        inclusive: bool = False,
    ) -> Chunk:
        """Rows with ``after < key <= upper`` in key order, at most ``limit``; fresh transaction.
        With ``inclusive``, ``after <= key <= upper`` (the first chunk of a key-range dump).
        Keys compare as the database orders them (row values for a composite key); a None
        bound is open."""
        ...

    def read_keys(self, info: TableInfo, keys: Sequence[Key]) -> Chunk: ...

    def parse_key(self, info: TableInfo, values: Sequence[object]) -> Key:
        """Turn user-given key values into the canonical key; raises DumpRequestError."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class ForgettingChunkReader(Protocol):
    """A chunk reader that caches what it learned of a table (columns, statements): told to
    forget it when a dump query found the table changed (:class:`dblog.errors.TableChanged`)."""

    def forget_table(self, table: TableId) -> None: ...


@runtime_checkable
class KeyListParser(Protocol):
    """An optional ability of a chunk reader: check and parse many user-given keys at once
    (one round trip to the source for a whole request, instead of one per key). Raises
    DumpRequestError naming the first bad value."""

    def parse_keys(self, info: TableInfo, keys: Sequence[Sequence[object]]) -> list[Key]: ...


class PendingWindow(Protocol):
    """Steps 2-4 of one chunk, sent to the source and running there."""

    def fileno(self) -> int:
        """A socket that becomes readable as results arrive (to wait on)."""
        ...

    def collect(self) -> Chunk | None:
        """The chunk once L, the SELECT and H are all done, else None; never blocks."""
        ...


@runtime_checkable
class WindowChunkReader(Protocol):
    """An optional capability of a chunk reader: steps 2-4 (L, the SELECT, H) sent at once and
    collected later, so the engine thread keeps emitting while the source works on the next
    chunk. The three must still commit in that order, as separate transactions, exactly as
    the watermark writer and ``read_chunk`` would."""

    @property
    def writes_windows(self) -> bool:
        """Whether this reader can write the watermarks (it knows the watermark row)."""
        ...

    def start_chunk_window(
        self, low: str, high: str, info: TableInfo, after: Key | None, upper: Key | None,
        limit: int, inclusive: bool = False,
    ) -> PendingWindow:
        """The SELECT reads what :meth:`ChunkReader.read_chunk` would, ``inclusive`` too."""
        ...


class WatermarkWriter(Protocol):
    def write(self, value: str) -> None:
        """Set this instance's watermark row to ``value`` in its own committed transaction."""

    def close(self) -> None: ...


class SourceConnector(Protocol):
    """A source: builds the three roles above. ``prepare`` checks settings and creates objects
    (the watermark table, the slot); ``check`` only reports; ``close`` releases what the
    connector itself holds (not the roles, which the engine closes)."""

    instance: str

    def prepare(self) -> None: ...

    def check(self) -> list[Finding]:
        """Assess the source (settings, rights, keys, plugins) and say the fix for each problem."""
        ...

    def log_reader(self) -> LogReader: ...

    def chunk_reader(self) -> ChunkReader: ...

    def watermark_writer(self) -> WatermarkWriter: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class LoggedImages:
    """What the source logs of a table's updates and deletes: the full old row
    (``full_before``) and every column of the new one, unchanged large values included
    (``complete_after``); ``fix`` says how to make it log both."""

    full_before: bool
    complete_after: bool = True
    fix: str | None = None

    @classmethod
    def postgres(cls, table: object, replica_identity: str, toastable: bool) -> LoggedImages:
        """``replica_identity``: ``relreplident`` (``d``, ``f``, ``i``, ``n``) or its name."""
        full = replica_identity.lower() in ("f", "full")
        return cls(full, full or not toastable, f"ALTER TABLE {table} REPLICA IDENTITY FULL;")

    @classmethod
    def binlog(cls) -> LoggedImages:
        return cls(True, True, None)


@runtime_checkable
class ImageLoggingSource(Protocol):
    """A source that can say what it logs per table (``dblog check`` compares it with what
    each output's format needs)."""

    def logged_images(self, table: TableId) -> LoggedImages: ...


@runtime_checkable
class RetirableSource(Protocol):
    """A source that can remove what dblog created in it for this pipeline (``dblog retire``):
    its replication slot, its row of the watermark table, and the table once no pipeline
    uses it. :meth:`retired` says what would go; :meth:`retire` removes it and says what went.
    A slot still in use (dblog running) is refused with the fix."""

    def retired(self) -> list[str]: ...

    def retire(self) -> list[str]: ...
