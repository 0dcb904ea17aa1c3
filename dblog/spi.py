"""The contracts between the core and everything that touches a driver.

The core (engine, window, dumps, acknowledgements) depends only on these protocols. Concrete
implementations live in ``dblog.connectors.*`` (source side), ``dblog.outputs.*`` (sinks),
``dblog.state`` (file store) and ``dblog.testing`` (in-memory doubles).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from dblog.model import ChangeEvent, Key, LogItem, RowImage, TableId, TableInfo
from dblog.positions import Position


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


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


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


class ChunkReader(Protocol):
    """Reads table metadata and primary-key chunks from the source (step 3 of the algorithm)."""

    def list_tables(self) -> list[TableId]: ...

    def table_info(self, table: TableId, key_columns: Sequence[str] | None = None) -> TableInfo:
        """Columns and key of ``table``; raises DumpRequestError if unknown or without a key."""
        ...

    def max_key(self, info: TableInfo) -> Key | None: ...

    def read_chunk(
        self, info: TableInfo, after: Key | None, upper: Key | None, limit: int
    ) -> Chunk:
        """Rows with ``after < key <= upper`` in key order, at most ``limit``; fresh transaction."""
        ...

    def read_keys(self, info: TableInfo, keys: Sequence[Key]) -> Chunk: ...

    def parse_key(self, info: TableInfo, values: Sequence[object]) -> Key:
        """Turn user-given key values into the canonical key; raises DumpRequestError."""
        ...

    def close(self) -> None: ...


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
        limit: int,
    ) -> PendingWindow: ...


class WatermarkWriter(Protocol):
    def write(self, value: str) -> None:
        """Set this instance's watermark row to ``value`` in its own committed transaction."""

    def close(self) -> None: ...


class SourceConnector(Protocol):
    """A source: builds the three roles above. ``prepare`` checks settings and creates objects."""

    instance: str

    def prepare(self) -> None: ...

    def log_reader(self) -> LogReader: ...

    def chunk_reader(self) -> ChunkReader: ...

    def watermark_writer(self) -> WatermarkWriter: ...


@runtime_checkable
class Output(Protocol):
    """Receives events in stream order and acknowledges what is durable."""

    name: str

    def open(self, committed_seq: int) -> None:
        """Start; ``committed_seq`` is the last sequence number in the committed state.

        Outputs that can (files, transactional sinks) drop anything they hold beyond it, so a
        restart replays exactly from the committed state.
        """

    def write(self, events: Sequence[ChangeEvent]) -> None:
        """Accept a batch; may buffer. Raises OutputError on failure."""

    def flush(self) -> int:
        """Make everything written durable; return the highest durable sequence number."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class StoredState:
    version: int
    data: dict[str, object]


class StateStore(Protocol):
    """Durable pipeline state with compare-and-set writes fenced by the leader epoch."""

    def load(self) -> StoredState | None: ...

    def save(self, data: dict[str, object], expected_version: int | None, epoch: int) -> int:
        """Write if the stored version is ``expected_version`` (None: must not exist) and
        ``epoch`` is not older than the stored epoch; return the new version or raise
        FencedError."""
        ...


class LeaderElection(Protocol):
    @property
    def epoch(self) -> int: ...

    def is_leader(self) -> bool:
        """False as soon as leadership is in doubt; the engine stops emitting."""
        ...
