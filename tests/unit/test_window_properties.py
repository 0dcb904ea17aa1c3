"""Property tests of the watermark algorithm: I1, I2 and I3 under random schedules.

Rows carry ``v``, the number of the test transaction that wrote them (0: present before the
log starts, so only a dump can deliver them). A log event's version is the number of its
transaction. I2 then reads: per key, versions in the output never go back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dblog.core.dumps import ChunkPlan
from dblog.core.model import ChangeEvent, Key, Op, RowImage, TableId, Watermark
from dblog.core.window import ChunkWindow, on_change, on_watermark, open_window, surviving_rows
from dblog.engine import PhaseHooks
from dblog.state import state_from_json
from dblog.testing import ListOutput, MemoryChunkReader, MemoryDatabase, MemoryStateStore, replay
from tests.unit.engine_script import (
    Run,
    VersionBook,
    assert_log_order,
    assert_no_time_travel,
    assert_replay_equals_source,
    assert_seq_contiguous,
    fast_settings,
    source_rows,
)

KEYS = 24

# one change: (table index, kind, key, second key for a key change)
CHANGE = st.tuples(
    st.integers(0, 2),
    st.sampled_from(["upsert", "upsert", "update", "delete", "move"]),
    st.integers(0, KEYS - 1),
    st.integers(0, KEYS - 1),
)
TX = st.lists(CHANGE, min_size=1, max_size=4)
TRUNCATE = "truncate"
# about one transaction in 25 is a TRUNCATE of one of the tables
TX_OR_TRUNCATE = st.tuples(st.integers(0, 24), TX, st.integers(0, 2)).map(
    lambda d: (TRUNCATE, d[2]) if d[0] == 17 else d[1])


def apply_tx(db: MemoryDatabase, book: VersionBook, tables: list[TableId], tx: Any) -> None:
    """Run one generated transaction; key changes only move an existing row to a free key,
    as a database with a primary key would allow."""
    if isinstance(tx, tuple) and tx and tx[0] == TRUNCATE:
        book.truncate(db, tables[tx[1] % len(tables)])
        return
    number = book.next()
    present = {t: set(db.tables[t].rows) for t in tables}
    changes: list[tuple[str, TableId, dict[str, Any]]] = []
    for table_ix, kind, k1, k2 in tx:
        table = tables[table_ix % len(tables)]
        keys = present[table]
        if kind == "move" and (k1,) in keys and (k2,) not in keys:
            changes.append(("update", table, {"id": k2, "v": number, "__old_key__": (k1,)}))
            keys.discard((k1,))
            keys.add((k2,))
        elif kind == "delete":
            changes.append(("delete", table, {"id": k1}))
            keys.discard((k1,))
        elif kind == "update":
            changes.append(("update", table, {"id": k1, "v": number}))
        else:
            changes.append(("upsert", table, {"id": k1, "v": number}))
            keys.add((k1,))
    book.transaction(db, changes, number)


def preload(db: MemoryDatabase, table: TableId, keys: set[int]) -> None:
    """Rows that exist before the log starts: only a dump can deliver them."""
    for k in keys:
        db.tables[table].rows[(k,)] = {"id": k, "v": 0}


# -- the pure window functions, fed the way the engine feeds them ---------------------------


@dataclass
class WindowScenario:
    initial: set[int]
    other_initial: set[int]
    after: int
    limit: int
    before_low: list[Any]
    before_select: list[Any]
    before_high: list[Any]
    after_high: list[Any]


@st.composite
def window_scenarios(draw: st.DrawFn) -> WindowScenario:
    phase = st.lists(TX_OR_TRUNCATE, max_size=5)
    return WindowScenario(
        initial=draw(key_sets()),
        other_initial=draw(st.sets(st.integers(0, KEYS - 1), max_size=5)),
        after=draw(st.integers(-1, KEYS)),
        limit=draw(st.integers(1, KEYS)),
        before_low=draw(phase),
        before_select=draw(phase),
        before_high=draw(phase),
        after_high=draw(phase),
    )


def run_window(db: MemoryDatabase, table: TableId, s: WindowScenario, book: VersionBook,
               tables: list[TableId], start: int, txs: dict[str, list[Any]],
               name: str) -> tuple[list[ChangeEvent], int, Sequence[tuple[Key, RowImage]], bool]:
    """One chunk: log up to L, L, txs, SELECT, txs, H, txs; then feed the log from ``start``
    through the window functions. Returns emitted events, the log offset reached, the chunk
    SELECT result and whether the window was discarded."""
    info = db.tables[table].info
    reader = MemoryChunkReader(db)
    for tx in txs["before_low"]:
        apply_tx(db, book, tables, tx)
    low, high = f"L-{name}", f"H-{name}"
    db.watermark(low)
    for tx in txs["before_select"]:
        apply_tx(db, book, tables, tx)
    after = None if s.after < 0 else (s.after,)
    selected = reader.read_chunk(info, after, None, s.limit).rows
    for tx in txs["before_high"]:
        apply_tx(db, book, tables, tx)
    db.watermark(high)
    for tx in txs["after_high"]:
        apply_tx(db, book, tables, tx)

    window: ChunkWindow | None = open_window(table, low, high, selected)
    out: list[ChangeEvent] = []
    discarded = False
    for item in db.log[start:]:
        if isinstance(item, Watermark):
            if window is None:
                continue
            window, closed = on_watermark(window, item.value)
            if closed:
                discarded = window.discarded
                out.extend(ChangeEvent(Op.READ, table, key, after=row)
                           for key, row in surviving_rows(window))
                window = None
            continue
        if item.op in (Op.BEGIN, Op.COMMIT):
            out.append(item)
            continue
        if window is not None:
            window = on_change(window, item)
        out.append(item)
    assert window is None, "the high watermark never closed the window"
    return out, len(db.log), selected, discarded


@settings(max_examples=400, deadline=None)
@given(window_scenarios())
def test_window_emits_no_time_travel_and_completes_the_chunk_range(s: WindowScenario) -> None:
    db = MemoryDatabase()
    t = db.create_table("public.t", ["id", "v"], ["id"])
    o = db.create_table("public.o", ["id", "v"], ["id"])
    preload(db, t, s.initial)
    preload(db, o, s.other_initial)
    book = VersionBook()
    tables = [t, o]
    txs = {"before_low": s.before_low, "before_select": s.before_select,
           "before_high": s.before_high, "after_high": s.after_high}
    out, end, selected, discarded = run_window(db, t, s, book, tables, 0, txs, "1")
    if discarded:
        # the engine reads a discarded chunk again; model that with a quiet second window
        empty: dict[str, list[Any]] = {k: [] for k in txs}
        again, _, selected, discarded = run_window(db, t, s, book, tables, end, empty, "2")
        assert not discarded
        out += again

    assert_no_time_travel(out, book)
    # log events are forwarded untouched and in log order
    log_events = [e for e in out if e.op is not Op.READ]
    assert log_events == [e for e in db.log if isinstance(e, ChangeEvent)]

    # I3 for the chunk's key range: (after, last selected key], or everything after ``after``
    # when the SELECT returned fewer rows than the limit
    def in_range(key: tuple[int, ...]) -> bool:
        if s.after >= 0 and key[0] <= s.after:
            return False
        return len(selected) < s.limit or key <= selected[-1][0]

    want = {k: r for k, r in source_rows(db).items() if k[0] == ("public", "t") and in_range(k[1])}
    got = {k: r for k, r in replay(out).items() if k[0] == ("public", "t") and in_range(k[1])}
    assert got == want


def test_window_property_model_detects_a_broken_drop_rule() -> None:
    """The property's checks are not vacuous: a window that ignores the drop rule emits a
    stale row after a newer log event, which the I2 check reports."""
    db = MemoryDatabase()
    t = db.create_table("public.t", ["id", "v"], ["id"])
    preload(db, t, {1})
    book = VersionBook()
    selected = MemoryChunkReader(db).read_chunk(db.tables[t].info, None, None, 10).rows
    db.watermark("L")
    apply_tx(db, book, [t], [(0, "upsert", 1, 0)])
    db.watermark("H")
    stream = [e for e in db.log if isinstance(e, ChangeEvent)]
    stream += [ChangeEvent(Op.READ, t, k, after=r) for k, r in selected]  # no drop rule
    try:
        assert_no_time_travel(stream, book)
    except AssertionError as exc:
        assert "time travel" in str(exc)
    else:
        raise AssertionError("a stale read after a newer update was not detected")


# -- the whole engine over the memory doubles -----------------------------------------------


@dataclass
class EngineScenario:
    n_tables: int
    initial: list[set[int]]
    chunk_size: int
    max_batch: int
    steps: list[list[Any]]
    after_low: list[list[Any]]
    before_high: list[list[Any]]
    key_dump: list[int] | None
    key_dump_at: int
    second_dump_at: int | None
    restart_at: int | None
    ack_lag: int | None
    flush_interval: float


def key_sets() -> st.SearchStrategy[set[int]]:
    """Membership drawn per key: tables are about half full rather than nearly empty."""
    return st.lists(st.booleans(), min_size=KEYS, max_size=KEYS).map(
        lambda bits: {k for k, present in enumerate(bits) if present})


@st.composite
def engine_scenarios(draw: st.DrawFn) -> EngineScenario:
    n_tables = draw(st.integers(1, 3))
    steps = draw(st.lists(st.lists(TX_OR_TRUNCATE, max_size=3), min_size=5, max_size=60))
    return EngineScenario(
        n_tables=n_tables,
        initial=[draw(key_sets()) for _ in range(n_tables)],
        chunk_size=draw(st.integers(1, 10)),
        max_batch=draw(st.sampled_from([1, 2, 3, 7, 64])),
        steps=steps,
        after_low=draw(st.lists(st.lists(TX_OR_TRUNCATE, max_size=2), min_size=1, max_size=8)),
        before_high=draw(st.lists(st.lists(TX_OR_TRUNCATE, max_size=2), min_size=1, max_size=8)),
        key_dump=draw(st.none() | st.lists(st.integers(0, KEYS - 1), min_size=1, max_size=6)),
        key_dump_at=draw(st.integers(0, 40)),
        second_dump_at=draw(st.none() | st.integers(0, 40)),
        restart_at=draw(st.none() | st.integers(1, 40)),
        ack_lag=draw(st.none() | st.integers(0, 30)),
        flush_interval=draw(st.sampled_from([0.0, 0.03, 0.2])),
    )


def run_engine_scenario(s: EngineScenario, restart: bool) -> None:
    db = MemoryDatabase()
    tables = [db.create_table(f"public.t{i}", ["id", "v"], ["id"]) for i in range(s.n_tables)]
    for table, keys in zip(tables, s.initial, strict=True):
        preload(db, table, keys)
    book = VersionBook()
    out = ListOutput()
    store = MemoryStateStore()
    after_low, before_high = list(s.after_low), list(s.before_high)
    progress = {"step": 0, "polls": 0}

    def inject(queue: list[list[Any]], plan: ChunkPlan) -> None:
        """DML inside the window, aimed at the keys the chunk is reading."""
        if not queue:
            return
        start = plan.keys[0] if plan.keys else plan.after
        base = 0 if start is None else start[0] + (0 if plan.keys else 1)
        span = s.chunk_size + 2
        for tx in queue.pop(0):
            if isinstance(tx, tuple):  # a TRUNCATE of the chunk's table
                apply_tx(db, book, [plan.table], tx)
                continue
            aimed = [(0, kind, min(KEYS - 1, base + k1 % span), k2) for _, kind, k1, k2 in tx]
            apply_tx(db, book, [plan.table], aimed)

    hooks = PhaseHooks(after_low=lambda plan: inject(after_low, plan),
                       before_high=lambda plan: inject(before_high, plan))

    def on_poll(run: Run) -> bool:
        progress["polls"] += 1
        step = progress["step"]
        progress["step"] += 1
        if step < len(s.steps):
            for tx in s.steps[step]:
                apply_tx(db, book, tables, tx)
        if step == s.key_dump_at and s.key_dump is not None:
            run.engine.request_dump(table=tables[0], keys=[[k] for k in s.key_dump])
        if step == s.second_dump_at:
            run.engine.request_dump([tables[-1]])
        run.stop_when_idle = step >= max(len(s.steps), s.key_dump_at, s.second_dump_at or 0)
        if restart and s.restart_at and s.ack_lag is not None and run is runs[0]:
            # the output lags: what it holds beyond its acknowledgement is lost on restart
            out.ack_limit = max(0, run.engine.delivery.last_seq - s.ack_lag)
        return restart and run is runs[0] and progress["polls"] == s.restart_at

    settings_ = fast_settings(s.chunk_size, flush_interval_s=s.flush_interval)

    def new_run() -> Run:
        return Run(db, [out], store, settings=settings_, on_poll=on_poll, hooks=hooks,
                   stop_when_idle=False, max_batch=s.max_batch)

    runs: list[Run] = [new_run()]
    runs[0].engine.request_dump(None)
    runs[0].go()
    if restart and s.restart_at is not None:
        out.ack_limit = None
        runs.append(new_run())
        runs[1].go()  # same store and output: resumes from the committed state

    assert_replay_equals_source(out.events, db)
    assert_log_order(out.events, db)
    assert_no_time_travel(out.events, book)
    assert_seq_contiguous(out.events)
    stored = store.load()
    assert stored is not None
    state = state_from_json(stored.data)
    assert state.seq == out.events[-1].seq if out.events else state.seq == 0
    assert all(d.state.value == "done" for d in state.dumps.dumps), state.dumps


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(engine_scenarios())
def test_engine_random_writes_keep_i1_i2_i3(s: EngineScenario) -> None:
    run_engine_scenario(s, restart=False)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(engine_scenarios())
def test_engine_random_writes_with_a_restart_keep_i1_i2_i3(s: EngineScenario) -> None:
    run_engine_scenario(s, restart=True)
