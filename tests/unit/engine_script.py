"""Drive :class:`dblog.engine.Engine` deterministically from the test thread.

``Engine.run`` is executed in the calling thread over a :class:`MemoryDatabase`; the log
reader is wrapped so that every ``poll`` first calls a test callback (which may write to the
database, request dumps, change knobs, inject failures or stop the engine) and advances a
:class:`FakeClock`. Nothing runs concurrently, so every run is reproducible.

Also holds the invariant checks shared by the engine tests (I1, I2, I3).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dblog.core.model import (
    ChangeEvent,
    EncodedRow,
    LogItem,
    Op,
    Row,
    RowImage,
    TableId,
    Watermark,
)
from dblog.core.positions import Position
from dblog.engine import Engine, EngineSettings, PhaseHooks
from dblog.spi import Finding, LeaderElection, Output, StateStore
from dblog.testing import (
    FakeClock,
    MemoryChunkReader,
    MemoryDatabase,
    MemoryLogReader,
    MemoryWatermarkWriter,
    MemoryWindowChunkReader,
    replay,
)


def row_of(image: RowImage) -> Row:
    """The row of an after-image: the memory source sends dicts, a dump fast path may send
    an :class:`EncodedRow` (its decoded row is the same row)."""
    return image.decode() if isinstance(image, EncodedRow) else image


def fast_settings(chunk_size: int = 10, **overrides: Any) -> EngineSettings:
    values: dict[str, Any] = {
        "chunk_size": chunk_size,
        "poll_timeout_s": 0.0,
        "flush_interval_s": 0.05,
        "heartbeat_interval_s": 1e9,
        "progress_interval_s": 1e9,
        "window_timeout_s": 1e9,
        "batch_size": 50,
        "chunk_worker": False,  # deterministic: chunks are read in the engine thread
        "output_threads": False,  # deterministic: outputs are called in the engine thread
    }
    values.update(overrides)
    return EngineSettings(**values)


class ScriptedReader:
    """A MemoryLogReader that calls back into the test before every poll."""

    def __init__(self, inner: MemoryLogReader, run: Run) -> None:
        self.inner = inner
        self.run = run

    def start(self, position: Position | None) -> None:
        self.inner.start(position)

    def poll(self, timeout: float) -> list[LogItem]:
        self.run.before_poll()
        items = self.inner.poll(timeout)
        if self.run.transform is not None:
            items = [out for item in items if (out := self.run.transform(item)) is not None]
        return items

    def acknowledge(self, position: Position) -> None:
        self.run.acknowledged.append(position)
        self.inner.acknowledge(position)

    def close(self) -> None:
        self.inner.close()

    @property
    def offset(self) -> int:
        return self.inner.offset


class ScriptedConnector:
    def __init__(self, db: MemoryDatabase, run: Run, max_batch: int = 64) -> None:
        self.db = db
        self.run = run
        self.max_batch = max_batch
        self.instance = "test"
        self.reader: ScriptedReader | None = None
        self.window_readers: list[MemoryWindowChunkReader] = []

    def prepare(self) -> None:
        pass

    def check(self) -> list[Finding]:
        return []

    def log_reader(self) -> ScriptedReader:
        self.reader = ScriptedReader(MemoryLogReader(self.db, self.max_batch), self.run)
        return self.reader

    def chunk_reader(self) -> MemoryChunkReader:
        if not self.run.windows:
            return MemoryChunkReader(self.db)
        reader = MemoryWindowChunkReader(self.db, hooks=self.run.source_hooks)
        self.window_readers.append(reader)
        return reader

    def watermark_writer(self) -> MemoryWatermarkWriter:
        return MemoryWatermarkWriter(self.db)

    def close(self) -> None:
        pass


PollHook = Callable[["Run"], bool | None]
Transform = Callable[[LogItem], LogItem | None]


@dataclass
class Run:
    """One engine run. ``on_poll(run)`` is called before each poll; returning True stops the
    engine (the items of that poll are still processed and the final commit happens)."""

    db: MemoryDatabase
    outputs: Sequence[Output]
    store: StateStore
    settings: EngineSettings = field(default_factory=fast_settings)
    on_poll: PollHook | None = None
    hooks: PhaseHooks | None = None
    transform: Transform | None = None
    """Rewrites (or drops, returning None) each log item the reader hands to the engine."""
    election: LeaderElection | None = None
    windows: bool = False
    """Chunk readers that send L, SELECT and H at once (with ``chunk_worker``: the engine
    thread collects them, no worker thread)."""
    source_hooks: PhaseHooks | None = None
    """Run by such a reader right after L and before H (writers at the source)."""
    stop_when_idle: bool = True
    max_polls: int = 20_000
    tick: float = 0.01
    max_batch: int = 64
    clock: FakeClock = field(default_factory=FakeClock)
    polls: int = 0
    acknowledged: list[Position] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.connector = ScriptedConnector(self.db, self, self.max_batch)
        self.engine = Engine(self.connector, self.outputs, self.store, self.settings,
                             clock=self.clock, hooks=self.hooks, election=self.election)

    @property
    def reader(self) -> ScriptedReader:
        assert self.connector.reader is not None
        return self.connector.reader

    def idle(self) -> bool:
        """No queued command, no active dump, and the reader has read the whole log."""
        engine = self.engine
        live = None if engine.scheduler is None else engine.scheduler.live.active()
        return (engine.commands.empty() and live is None
                and self.reader.offset >= len(self.db.log))

    def before_poll(self) -> None:
        self.polls += 1
        self.clock.advance(self.tick)
        if self.polls > self.max_polls:
            raise AssertionError(f"engine did not finish within {self.max_polls} polls")
        stop = bool(self.on_poll(self)) if self.on_poll is not None else False
        if stop or (self.stop_when_idle and self.idle()):
            self.engine.stop()

    def go(self) -> Run:
        self.engine.run()
        return self


# -- invariant checks ---------------------------------------------------------------------


def source_rows(db: MemoryDatabase) -> dict[Any, dict[str, Any]]:
    return {((t.schema, t.name), k): r for t, mem in db.tables.items() for k, r in mem.rows.items()}


def assert_replay_equals_source(events: Sequence[ChangeEvent], db: MemoryDatabase) -> None:
    got, want = replay(events), source_rows(db)
    missing = sorted(set(want) - set(got), key=repr)[:5]
    extra = sorted(set(got) - set(want), key=repr)[:5]
    wrong = sorted((k for k in set(got) & set(want) if got[k] != want[k]), key=repr)[:5]
    assert got == want, f"replay differs: missing {missing}, extra {extra}, wrong {wrong}"


def log_positions_expected(db: MemoryDatabase, upto: int | None = None) -> list[Position]:
    """Positions of the log entries an engine must forward: every row/table event, and the
    BEGIN/COMMIT of transactions that contain one (watermark transactions never reach outputs).
    ``upto``: only the first ``upto`` log entries (complete transactions among them).
    """
    out: list[Position] = []
    pending: list[ChangeEvent] = []
    has_events = False
    for item in db.log[:upto]:
        if isinstance(item, Watermark):
            continue
        if item.op is Op.BEGIN:
            pending, has_events = [item], False
        elif item.op is Op.COMMIT:
            if has_events:
                out.extend(e.position for e in [*pending, item])  # type: ignore[misc]
            pending = []
        else:
            pending.append(item)
            has_events = True
    return out


def assert_log_order(events: Sequence[ChangeEvent], db: MemoryDatabase) -> None:
    """I1: the log events of the output are exactly the source's, once each, in commit order,
    inside BEGIN/COMMIT markers of their own transaction."""
    got = [e.position for e in events if e.op is not Op.READ]
    want = log_positions_expected(db)
    if got != want:
        first = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
                     min(len(got), len(want)))
        raise AssertionError(
            f"log events differ from the source log at index {first}: output "
            f"{[str(p) for p in got[max(0, first - 3):first + 3]]} vs source "
            f"{[str(p) for p in want[max(0, first - 3):first + 3]]} "
            f"(lengths {len(got)} vs {len(want)})")
    current: int | None = None
    for event in events:
        if event.op is Op.READ:
            continue
        if event.op is Op.BEGIN:
            assert current is None, f"BEGIN of tx {event.txid} inside tx {current}"
            current = event.txid
        elif event.op is Op.COMMIT:
            assert current == event.txid, f"COMMIT of tx {event.txid} inside tx {current}"
            current = None
        else:
            assert current == event.txid, f"{event.op} of tx {event.txid} outside its tx"


def assert_seq_contiguous(events: Sequence[ChangeEvent]) -> None:
    seqs = [e.seq for e in events]
    assert seqs == list(range(1, len(seqs) + 1)), f"sequence numbers not 1..n: {seqs[:20]}"


class VersionBook:
    """Per-transaction version numbers for I2 checks.

    Rows carry ``v``: the number of the test transaction that wrote them. ``record`` maps the
    source txid of that transaction to its number, so a log event's version is known too.
    """

    def __init__(self) -> None:
        self.counter = 0
        self.by_txid: dict[int, int] = {}

    def next(self) -> int:
        self.counter += 1
        return self.counter

    def record(self, db: MemoryDatabase, number: int) -> None:
        last = db.log[-1]
        assert isinstance(last, ChangeEvent) and last.op is Op.COMMIT
        assert last.txid is not None
        self.by_txid[last.txid] = number

    def transaction(self, db: MemoryDatabase, changes: list[tuple[str, TableId, dict[str, Any]]],
                    number: int) -> None:
        db.transaction(changes)
        self.record(db, number)

    def truncate(self, db: MemoryDatabase, table: TableId) -> None:
        number = self.next()
        db.truncate(table)
        self.record(db, number)


def assert_no_time_travel(events: Sequence[ChangeEvent], book: VersionBook,
                          version_column: str = "v") -> None:
    """I2: for every key, versions never go back; a read never resurrects a key that an
    already emitted delete/truncate/key change removed, and never carries an older version
    than an already emitted log event for that key."""
    last: dict[Any, tuple[int, bool]] = {}  # key -> (version, removed)
    truncated: dict[Any, int] = {}
    for event in events:
        if event.op in (Op.BEGIN, Op.COMMIT, Op.SCHEMA) or event.table is None:
            continue
        table = event.table
        if event.op is Op.TRUNCATE:
            version = book.by_txid[event.txid]  # type: ignore[index]
            truncated[table] = version
            for k in [k for k in last if k[0] == table]:
                last[k] = (version, True)
            continue
        key = (table, event.key)
        if event.op is Op.READ:
            assert event.after is not None
            version = row_of(event.after)[version_column]
            seen, removed = last.get(key, (truncated.get(table, -1), True))
            ok = version > seen if removed else version >= seen
            assert ok, (f"time travel: read of {key} version {version} after a "
                        f"{'removal' if removed else 'change'} at version {seen}")
            last[key] = (version, False)
            continue
        version = book.by_txid[event.txid]  # type: ignore[index]
        seen, _ = last.get(key, (-1, False))
        assert version >= seen, f"log event of {key} version {version} after version {seen}"
        if event.old_key is not None:
            last[(table, event.old_key)] = (version, True)
        last[key] = (version, event.op is Op.DELETE)
