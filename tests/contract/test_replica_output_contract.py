"""The contract of replica outputs (tables, not an event log), run against every target: the
SQL output on SQLite, PostgreSQL and MariaDB, and the Delta output.

A replica output is an Output, a CheckpointingOutput and PipelineBound: after any sequence of
batches, flushes, restarts and replays of stream suffixes, the target's tables as a reader sees
them (tombstones hidden) equal the naive replay of the stream up to what the output
acknowledged, never an older state (also across a kill at any commit of a flush); a deposed
leader's commit is refused by the target; the checkpoint, the truncate barriers and the guard
scheme survive restarts.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from dblog.core.model import ChangeEvent, ColumnInfo, Key, Op, Row, TableId, TableInfo
from dblog.errors import FatalOutputError, LeadershipLost, RetryableOutputError
from dblog.outputs.sql import SqlOutput
from dblog.replica import POSTGRES, POSTGRES_AT_COMMIT, register_scheme
from dblog.spi import (
    Checkable,
    Checkpoint,
    CheckpointingOutput,
    DiscardingOutput,
    FencedOutput,
    Output,
    PipelineBound,
    TableAwareOutput,
)
from tests.integration.conftest import pg_admin_dsn
from tests.integration.mysql_fixtures import maria_admin_dsn
from tests.replica_targets import (
    TARGETS,
    DeltaTarget,
    ReplicaOutput,
    SqlTarget,
    Target,
    int_info,
    make_target,
    target_fixture,
)
from tests.unit.test_replica_sim import TABLES, Source, boundaries, lsn, reference

__all__ = ["maria_admin_dsn", "pg_admin_dsn"]
A, B = TABLES


@pytest.fixture()
def infos() -> dict[TableId, TableInfo]:
    """The source's table metadata as the outputs see it (a test may change it)."""
    return {A: int_info(A), B: int_info(B)}


@pytest.fixture(params=TARGETS)
def target(request: pytest.FixtureRequest, tmp_path: Path,
           infos: dict[TableId, TableInfo]) -> Iterator[Target]:
    yield from target_fixture(request.param, request, tmp_path, infos.get)


def live(target: Target) -> dict[TableId, dict[Key, Row]]:
    return {t: target.live(t) for t in TABLES}


def stream(flavour: str, seed: int, steps: int) -> list[ChangeEvent]:
    return Source(flavour, random.Random(seed)).run(steps)


def deliver(output: ReplicaOutput, events: Sequence[ChangeEvent], rnd: random.Random) -> int:
    """Write ``events`` in random batches with random flushes; flush at the end."""
    i = 0
    while i < len(events):
        size = rnd.randint(1, 12)
        output.write(events[i:i + size])
        i += size
        if rnd.random() < 0.4:
            output.flush()
    return output.flush()


def test_a_replica_output_has_every_ability(target: Target) -> None:
    output = target.new_output()
    assert isinstance(output, Output) and output.name
    for ability in (CheckpointingOutput, PipelineBound, FencedOutput, DiscardingOutput,
                    TableAwareOutput):
        assert isinstance(output, ability), ability
    assert isinstance(output, Checkable)
    assert next(f.level for f in output.check()) == "ok"


@pytest.mark.parametrize("flavour", ["pg", "mariadb"])
def test_random_stream_equals_the_replay(target: Target, flavour: str) -> None:
    events = stream(flavour, 7, 45)
    output = target.new_output()
    output.open(0)
    assert output.flush() == 0  # nothing written: the committed seq
    acked = deliver(output, events, random.Random(3))
    assert acked == len(events)  # the stream ends at a transaction boundary
    expected = reference(events)[-1]
    assert live(target) == expected
    assert any(expected.values()), "the stream left no rows: a weak test"


def test_replays_of_suffixes_never_regress_or_resurrect(target: Target) -> None:
    """Restarts at random boundaries replay from an earlier boundary (a committed state
    behind what this output applied, duplicated chunks included): after every flush at a
    boundary the tables equal the replay up to the furthest point applied so far."""
    events = stream("pg", 11, 40)
    states, cuts = reference(events), boundaries(events)
    rnd = random.Random(5)
    applied = 0
    for round_ in range(4):
        output = target.new_output()
        start = rnd.choice([c for c in cuts if c <= applied])
        output.open(start)
        end = rnd.choice([c for c in cuts if c >= start])
        if round_ == 3:
            end = len(events)
        segment = [c for c in cuts if start <= c <= end]
        for lo, hi in itertools.pairwise(segment):
            output.write(events[lo:hi])
            output.flush()
            applied = max(applied, hi)
            assert live(target) == states[applied], (round_, start, hi, applied)
        output.close()
    assert applied == len(events)


class CutInside(NamedTuple):
    events: list[ChangeEvent]
    begin: int
    """The index of the cut transaction's BEGIN."""
    commit: int
    """The index of its COMMIT: the first flush had the events before it."""
    acknowledged: int
    """What the first flush returned."""
    seen: Any
    """What a reader of the target saw after the first flush."""


def _flushed_inside_a_transaction(target: Target, flavour: str) -> CutInside:
    """A stream flushed once inside a transaction (before its COMMIT), then whole (the
    target must then equal the replay of the whole stream)."""
    events = stream(flavour, 3, 12)
    begin = next(i for i, e in enumerate(events) if e.op is Op.BEGIN and i > 3)
    commit = next(i for i in range(begin + 1, len(events)) if events[i].op is Op.COMMIT)
    output = target.new_output()
    output.open(0)
    output.write(events[:commit])
    acknowledged, seen = output.flush(), live(target)
    output.write(events[commit:])
    assert output.flush() == len(events)
    assert live(target) == reference(events)[-1]
    return CutInside(events, begin, commit, acknowledged, seen)


def test_an_open_transaction_is_written_up_to_its_last_event(target: Target) -> None:
    """dblog's PostgreSQL BEGIN carries the commit end: nothing waits for the COMMIT."""
    cut = _flushed_inside_a_transaction(target, "pg")
    assert cut.acknowledged == cut.events[cut.commit - 1].seq
    assert cut.seen == reference(cut.events)[cut.commit]


@pytest.fixture()
def held_until_commit() -> Iterator[None]:
    """A PostgreSQL connector whose BEGIN carries the first LSN: POSTGRES_AT_COMMIT."""
    register_scheme(POSTGRES_AT_COMMIT)
    try:
        yield
    finally:
        register_scheme(POSTGRES)


@pytest.mark.usefixtures("held_until_commit")
def test_an_open_transaction_is_held_until_its_commit(target: Target) -> None:
    cut = _flushed_inside_a_transaction(target, "pg-first-lsn")
    assert cut.acknowledged == cut.events[cut.begin].seq - 1
    assert cut.seen == reference(cut.events)[cut.begin]


def test_the_checkpoint_is_committed_with_the_data(target: Target) -> None:
    events = stream("pg", 4, 10)
    output = target.new_output()
    output.open(0)
    output.write(events)
    state: dict[str, object] = {"seq": len(events), "dumps": [], "position":
                                events[-1].position.encode() if events[-1].position else None}
    checkpoint = Checkpoint("contract", 1, state)
    assert output.flush_checkpoint(checkpoint) == len(events)
    output.close()
    again = target.new_output(epoch=2)
    again.open(0)
    assert again.committed_checkpoint() == Checkpoint("contract", 1, state)
    assert live(target) == reference(events)[-1]


@pytest.mark.usefixtures("held_until_commit")
def test_a_checkpoint_past_a_held_transaction_is_not_stored(target: Target) -> None:
    events = stream("pg-first-lsn", 5, 10)
    begin = max(i for i, e in enumerate(events) if e.op is Op.BEGIN)
    output = target.new_output()
    output.open(0)
    output.write(events[:begin + 2])
    beyond = Checkpoint("contract", 1, {"position": None, "seq": begin + 2, "dumps": []})
    assert output.flush_checkpoint(beyond) == begin
    output.close()
    again = target.new_output()
    again.open(0)
    assert again.committed_checkpoint() is None


def test_a_deposed_leaders_commit_is_refused_by_the_target(target: Target) -> None:
    events = stream("pg", 6, 20)
    half = boundaries(events)[len(boundaries(events)) // 2]
    old = target.new_output(epoch=1)
    old.open(0)
    old.write(events[:half])
    old.flush()
    old.write(events[half:])  # frozen here; a successor takes over
    successor = target.new_output(epoch=2)
    successor.open(half)
    with pytest.raises(LeadershipLost):
        old.flush()
    assert live(target) == reference(events)[half]
    successor.write(events[half:])
    assert successor.flush() == len(events)
    assert live(target) == reference(events)[-1]
    stale = target.new_output(epoch=1)
    with pytest.raises(LeadershipLost):
        stale.open(0)


def test_the_truncate_barrier_survives_a_restart(target: Target) -> None:
    events = stream("mariadb", 8, 60)
    truncate = max(i for i, e in enumerate(events) if e.op is Op.TRUNCATE)
    end = min(c for c in boundaries(events) if c > truncate)
    output = target.new_output()
    output.open(0)
    output.write(events[:end])
    output.flush()
    output.close()
    restarted = target.new_output()
    restarted.open(0)
    restarted.write(events[:truncate - 1])  # an older replay: nothing comes back
    restarted.flush()
    assert live(target) == reference(events)[end]


def _change(op: Op, key: int, txn: int, v: int = 0) -> list[ChangeEvent]:
    after = None if op is Op.DELETE else {"id": key, "v": v, "blob": f"b{v}"}
    base = 0x100 * txn
    return [ChangeEvent(Op.BEGIN, None, position=lsn(base)),
            ChangeEvent(op, A, (key,), after=after, position=lsn(base + 1)),
            ChangeEvent(Op.COMMIT, None, position=lsn(base + 2))]


def _numbered(groups: Sequence[list[ChangeEvent]]) -> list[ChangeEvent]:
    events = [e for group in groups for e in group]
    for seq, event in enumerate(events, 1):
        event.seq = seq
    return events


class Killed(BaseException):
    """Stands for SIGKILL at one commit of a flush."""


CommitPoints = Sequence[tuple[object, str]]
"""The calls of a target's output that each write one commit (owner, attribute)."""


def commit_points(kind: str) -> CommitPoints:
    """``kind``'s commits: the SQL output's flush is one transaction (killed inside it);
    the Delta output's are the checkpoint row, the truncate's delete and the MERGE/append."""
    if kind != "delta":
        from dblog.outputs import sql as sql_output

        return [(sql_output, "apply_table")]
    from deltalake import DeltaTable

    from dblog.outputs import delta_checkpoint, delta_table

    return [(delta_checkpoint.CheckpointTable, "write"), (DeltaTable, "delete"),
            (delta_table, "merge"), (delta_table, "append")]


def _kill_at(patch: pytest.MonkeyPatch, points: CommitPoints, at: int) -> None:
    """Raise Killed instead of the ``at``-th (from 0) call of any of ``points``."""
    calls = itertools.count()
    for owner, name in points:
        real = getattr(owner, name)

        def killing(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            if next(calls) == at:
                raise Killed
            return _real(*args, **kwargs)

        patch.setattr(owner, name, killing)


def _truncate_a(txn: int) -> list[ChangeEvent]:
    base = 0x100 * txn
    return [ChangeEvent(Op.BEGIN, None, position=lsn(base)),
            ChangeEvent(Op.TRUNCATE, A, position=lsn(base + 1)),
            ChangeEvent(Op.COMMIT, None, position=lsn(base + 2))]


def _at_seq(events: Sequence[ChangeEvent], seq: int) -> Checkpoint:
    position = events[seq - 1].position
    assert position is not None
    return Checkpoint("contract", 1, {"position": position.encode(), "seq": seq, "dumps": []})


def truncating_flush_crashes(fresh: Callable[[], Target], points: CommitPoints,
                             only: Sequence[int] = ()) -> int:
    """A fresh target per crash point: a flush holding a truncate (seq 10-12) and a later
    insert is killed at its ``at``-th commit; the restarted output replays from the stored
    checkpoint (seq 6) a change older than the truncate: a reader never sees the table go
    back (a truncated row come back); the whole replay ends equal to the source. Returns
    the number of crash points (the flush that was not killed); ``only``: these points."""
    events = _numbered([_change(Op.INSERT, 1, 1, 1), _change(Op.INSERT, 2, 2, 2),
                        _change(Op.UPDATE, 1, 3, 3), _truncate_a(4), _change(Op.INSERT, 5, 5, 5)])
    states = [s[A] for s in reference(events)]
    order = [states[9], states[12], states[15]]  # what a reader may see, in stream order
    for at in only or range(99):
        target = fresh()
        output = target.new_output()
        output.open(0)
        output.write(events[:9])
        output.flush_checkpoint(_at_seq(events, 6))  # the engine's checkpoint lags the data
        output.write(events[9:])
        with pytest.MonkeyPatch.context() as patch:
            _kill_at(patch, points, at)
            try:
                assert output.flush_checkpoint(_at_seq(events, 15)) == 15
                assert target.live(A) == states[15]
                return at
            except Killed:
                output.discard()
        seen = target.live(A)
        restarted = target.new_output()
        restarted.open(6)
        assert restarted.committed_checkpoint() == _at_seq(events, 6)
        restarted.write(events[6:9])  # the replay, flushed before it reaches the truncate
        restarted.flush()
        after = target.live(A)
        assert seen in order and after in order, (at, seen, after)
        assert order.index(after) >= order.index(seen), (at, seen, after)
        restarted.write(events[9:])
        restarted.flush()
        assert target.live(A) == states[15], at
    return len(only)


@pytest.mark.parametrize("kind", TARGETS)
def test_a_crash_in_a_truncating_flush_never_brings_truncated_rows_back(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path,
        infos: dict[TableId, TableInfo]) -> None:
    """Delta has no transaction across tables: the truncate's delete (no tombstones left)
    used to commit before the checkpoint row that stores its barrier, so a crash between
    them and a replay from the stored checkpoint inserted the truncated rows again."""
    made: list[Target] = []

    def fresh() -> Target:
        folder = tmp_path / str(len(made))
        folder.mkdir()
        made.append(make_target(kind, request, folder, infos.get))
        return made[-1]

    try:
        points = truncating_flush_crashes(fresh, commit_points(kind))
    finally:
        for target in made:
            target.close()
    assert points == (1 if kind != "delta" else 4)


def test_tombstones_are_hidden_kept_and_purged_by_margin(target: Target) -> None:
    events = _numbered([_change(Op.INSERT, 1, 1, 1), _change(Op.INSERT, 2, 2, 2),
                        _change(Op.DELETE, 1, 3)])
    output = target.new_output(tombstone_margin=0, purge_interval_s=3600)
    output.open(0)
    output.write(events)
    output.flush()
    assert target.live(A) == {(2,): {"id": 2, "v": 2, "blob": "b2"}}
    assert target.stored(A) == {(1,): True, (2,): False}
    output.close()
    purging = target.new_output(tombstone_margin=0, purge_interval_s=0)
    purging.open(len(events))
    later = _numbered([*[_change(Op.INSERT, 1, 1, 1), _change(Op.INSERT, 2, 2, 2),
                         _change(Op.DELETE, 1, 3)], _change(Op.INSERT, 3, 4, 3)])
    position = later[-1].position
    assert position is not None
    purging.write(later[len(events):])
    purging.flush_checkpoint(Checkpoint("contract", 1, {"position": position.encode(),
                                                        "seq": len(later), "dumps": []}))
    assert target.stored(A) == {(2,): False, (3,): False}


def test_added_source_columns_reach_the_replica(target: Target,
                                               infos: dict[TableId, TableInfo]) -> None:
    """A column the metadata gained (the source's ALTER) and one it does not know yet (typed
    from its value) are both added; earlier rows read NULL there."""
    first = ChangeEvent(Op.INSERT, B, (1,), after={"id": 1, "v": 1, "blob": "x"},
                        position=lsn(0x101))
    added = ChangeEvent(Op.INSERT, B, (2,), position=lsn(0x201),
                        after={"id": 2, "v": 2, "blob": "y", "extra": "e", "n": 5})
    events = _numbered([[ChangeEvent(Op.BEGIN, None, position=lsn(0x100)), first,
                         ChangeEvent(Op.COMMIT, None, position=lsn(0x102))],
                        [ChangeEvent(Op.BEGIN, None, position=lsn(0x200)), added,
                         ChangeEvent(Op.COMMIT, None, position=lsn(0x202))]])
    output = target.new_output()
    output.open(0)
    output.write(events[:3])
    output.flush()
    infos[B] = int_info(B, "extra")  # "n" stays unknown to the metadata
    output.write(events[3:])
    output.flush()
    infos[B] = TableInfo(B, (*int_info(B, "extra").columns, ColumnInfo("n", "bigint")), ("id",))
    assert target.live(B) == {(1,): {"id": 1, "v": 1, "blob": "x", "extra": None, "n": None},
                              (2,): {"id": 2, "v": 2, "blob": "y", "extra": "e", "n": 5}}


def _insert_b(key: int, txn: int, **values: Any) -> list[ChangeEvent]:
    base = 0x100 * txn
    return [ChangeEvent(Op.BEGIN, None, position=lsn(base)),
            ChangeEvent(Op.INSERT, B, (key,), position=lsn(base + 1),
                        after={"id": key, "v": txn, "blob": "b", **values}),
            ChangeEvent(Op.COMMIT, None, position=lsn(base + 2))]


def test_a_column_first_seen_null_is_typed_by_a_value_or_the_metadata(
        target: Target, infos: dict[TableId, TableInfo]) -> None:
    """Columns the metadata does not know yet whose first values are None are not typed
    from None (as JSON): ``note`` is added when a value arrives (read back as the text, not
    JSON-quoted), ``n`` only after a restart whose metadata names it (not refused then)."""
    events = _numbered([_insert_b(1, 1, note=None, n=None), _insert_b(2, 2, note="hi", n=None),
                        _insert_b(3, 3, note="x", n=5)])
    output = target.new_output()
    output.open(0)
    output.write(events[:3])
    output.flush()
    output.write(events[3:6])
    committed = output.flush()
    output.close()
    infos[B] = TableInfo(B, (*int_info(B, "note").columns, ColumnInfo("n", "bigint")), ("id",))
    restarted = target.new_output()
    restarted.open(committed)
    restarted.write(events[6:])
    restarted.flush()
    assert target.live(B) == {
        (1,): {"id": 1, "v": 1, "blob": "b", "note": None, "n": None},
        (2,): {"id": 2, "v": 2, "blob": "b", "note": "hi", "n": None},
        (3,): {"id": 3, "v": 3, "blob": "b", "note": "x", "n": 5}}


def test_a_partial_update_of_a_row_not_held_yet_waits_for_the_dump(target: Target) -> None:
    """An unchanged-TOAST update of a row a running dump has not reached: left out (not
    refused, not written without its kept column); the dump row brings the whole row."""
    partial = ChangeEvent(Op.UPDATE, A, (7,), after={"id": 7, "v": 2}, unchanged=("blob",),
                          position=lsn(0x101))
    events = _numbered([[ChangeEvent(Op.BEGIN, None, position=lsn(0x100)), partial,
                         ChangeEvent(Op.COMMIT, None, position=lsn(0x102))],
                        [ChangeEvent(Op.READ, A, (7,), after={"id": 7, "v": 2, "blob": "big"},
                                     position=lsn(0x200), dump_id="d")]])
    output = target.new_output()
    output.open(0)
    output.write(events[:3])
    assert output.flush() == 3
    assert target.live(A) == {}
    output.write(events[3:])
    output.flush()
    assert target.live(A) == {(7,): {"id": 7, "v": 2, "blob": "big"}}


def _incompatible(target: Target) -> None:
    if isinstance(target, SqlTarget):
        target.execute("CREATE TABLE a (id INTEGER PRIMARY KEY, v BIGINT)")
    else:
        assert isinstance(target, DeltaTarget)
        import pyarrow as pa
        from deltalake import write_deltalake

        write_deltalake(str(target.table_path(A)), pa.table({"id": [1], "v": ["x"]}))


def test_an_incompatible_existing_table_is_refused_with_the_fix(target: Target) -> None:
    _incompatible(target)
    output = target.new_output()
    output.open(0)
    output.write(_numbered([_change(Op.INSERT, 1, 1, 1)]))
    with pytest.raises(FatalOutputError) as raised:
        output.flush()
    error: Any = raised.value
    assert "not a dblog replica" in error.message
    assert error.fix and ("drop" in error.fix or "delete" in error.fix)


@pytest.fixture(params=[t for t in TARGETS if t != "delta"])
def sql_target(request: pytest.FixtureRequest, tmp_path: Path,
               infos: dict[TableId, TableInfo]) -> Iterator[SqlTarget]:
    for made in target_fixture(request.param, request, tmp_path, infos.get):
        assert isinstance(made, SqlTarget)
        yield made


def test_sql_check_names_the_unique_constraint_rule(sql_target: SqlTarget) -> None:
    target = sql_target
    output = target.new_output()
    output.open(0)
    output.write(_numbered([_change(Op.INSERT, 1, 1, 1)]))
    output.flush()
    assert isinstance(output, SqlOutput)
    assert any("only unique constraint" in f.message for f in output.check())
    target.execute("CREATE UNIQUE INDEX a_v ON a (v)")
    findings = output.check()
    assert [f.level for f in findings if "a_v" in f.message] == ["error"]
    restarted = target.new_output()
    restarted.open(1)
    restarted.write(_numbered([_change(Op.INSERT, 2, 2, 2)]))
    with pytest.raises(FatalOutputError, match="a_v"):
        restarted.flush()


def test_a_write_retried_after_a_failed_commit_is_buffered_once(
        target: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    """``commit_every`` makes write commit; when that commit fails the engine retries the same
    batch, which must not be buffered twice (a PostgreSQL BEGIN seen twice is an error)."""
    events = stream("pg", 9, 20)
    output = target.new_output(commit_every=5)
    output.open(0)
    real = output._commit
    failed: list[bool] = []

    def failing(checkpoint: Checkpoint | None) -> int:
        if not failed:
            failed.append(True)
            raise RetryableOutputError("the target went away")
        return real(checkpoint)

    monkeypatch.setattr(output, "_commit", failing)
    batch = events[:8]
    with pytest.raises(RetryableOutputError):
        output.write(batch)
    output.write(batch)  # the retry
    output.write(events[8:])
    assert output.flush() == len(events)
    assert live(target) == reference(events)[-1]


@pytest.fixture()
def delta_target(tmp_path: Path, infos: dict[TableId, TableInfo]) -> Iterator[DeltaTarget]:
    target = DeltaTarget(tmp_path / "delta", infos.get)
    yield target
    target.close()


def test_delta_refuses_a_commit_prepared_before_the_successors_claim(
        delta_target: DeltaTarget, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race the epoch check cannot close: a deposed leader that checked the epoch before
    its successor claimed the tables. Its commit is refused by the table itself (a conflict
    with the claim's metadata change), here with the deposed leader's own check removed."""
    from dblog.outputs import delta_table

    events = stream("pg", 12, 20)
    half = boundaries(events)[len(boundaries(events)) // 2]
    old = delta_target.new_output(epoch=1)
    old.open(0)
    old.write(events[:half])
    old.flush()
    successor = delta_target.new_output(epoch=2)
    successor.open(half)  # claims every table: a metadata commit under epoch 2
    monkeypatch.setattr(delta_table, "check_epoch", lambda *args: None)  # its snapshots stay
    old.write(events[half:])
    with pytest.raises(RetryableOutputError, match=r"(?i)metadata changed|concurrent"):
        old.flush()
    assert live(delta_target) == reference(events)[half]


def test_delta_commits_at_most_every_commit_interval_and_at_close(
        delta_target: DeltaTarget) -> None:
    events = stream("pg", 13, 12)
    output = delta_target.new_output(commit_interval_s=3600)
    output.open(0)
    output.write(events)
    assert output.flush() == 0  # not due: nothing committed, nothing acknowledged
    assert live(delta_target) == reference(events)[0]
    output.close()  # commits what waits
    assert live(delta_target) == reference(events)[-1]
