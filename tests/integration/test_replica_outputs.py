"""Replica outputs against real sources (PostgreSQL, MariaDB) and real targets (SQLite,
PostgreSQL, MariaDB, Delta): the target tables themselves, as a reader sees them (tombstones
hidden), equal the source after the central scenario (concurrent writers during a dump), after
SIGKILLs of the capture process, and after the target database restarted mid-stream; a stream
with a replayed suffix, duplicated chunks and an out-of-order delete/insert pair neither
resurrects nor regresses a row (and does, with the guard removed); an incompatible existing
table stops the pipeline with the fix."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from dblog.app.pipeline import Pipeline
from dblog.core.model import ChangeEvent, ColumnInfo, Op, TableId, TableInfo
from dblog.engine import EngineSettings
from dblog.errors import FatalOutputError
from dblog.outputs import delta_table, sql_write
from dblog.outputs.sql_schema import ReplicaTable
from dblog.state import FileStateStore, state_from_json
from tests.replica_targets import (
    TARGETS,
    DeltaTarget,
    ReplicaOutput,
    SqlTarget,
    Target,
    maria_url,
    pg_url,
    source_lookup,
    static_lookup,
    target_fixture,
)
from tests.unit.test_replica_sim import lsn

from .pgutil import dump_state, wait_until
from .sources import Kit, kit

pytestmark = pytest.mark.integration
__all__ = ["kit"]


@pytest.fixture(params=TARGETS)
def replica(request: pytest.FixtureRequest, tmp_path: Path, kit: Kit) -> Iterator[Target]:
    """A target for ``kit``'s tables (metadata from a chunk reader of its own)."""
    reader = kit.chunk_reader()
    try:
        yield from target_fixture(request.param, request, tmp_path, source_lookup(reader))
    finally:
        reader.close()


def assert_equal_to_source(kit: Kit, target: Target) -> int:
    """Every captured table of the target equals the source's; returns the rows compared."""
    rows = 0
    for name in kit.tables:
        table = TableId.parse(name)
        key_columns = target.kinds(table)[1]
        expected = {key: {**row, **dict(zip(key_columns, key, strict=True))}  # the event's key
                    for (_, key), row in kit.source_rows([name]).items()}
        got = target.live(table)
        missing, extra = expected.keys() - got.keys(), got.keys() - expected.keys()
        differ = [k for k in expected.keys() & got.keys() if expected[k] != got[k]]
        assert not (missing or extra or differ), (
            f"{name}: {len(missing)} missing, {len(extra)} extra, {len(differ)} differ; e.g. "
            f"{[(k, expected.get(k), got.get(k)) for k in [*missing, *extra, *differ][:3]]}")
        rows += len(expected)
    return rows


def _catch_up(pipeline: Pipeline, kit: Kit, timeout: float = 120) -> None:
    target = kit.current_position()

    def caught_up() -> bool:
        position = pipeline.status()["committed_position"]
        return position is not None and kit.parse_position(position) >= target

    wait_until(caught_up, timeout, f"the committed position to reach {target}")


def _pipeline(kit: Kit, output: ReplicaOutput, tmp: Path) -> Pipeline:
    settings = EngineSettings(chunk_size=50, flush_interval_s=0.2, heartbeat_interval_s=1)
    return Pipeline(kit.connector("central", "central"), [output],
                    state_path=str(tmp / "state.json"), settings=settings)


def test_central_scenario_into_the_replica(kit: Kit, replica: Target, tmp_path: Path) -> None:
    kit.create_schema(rows=1000)
    pipeline = _pipeline(kit, replica.new_output(pipeline="central"), tmp_path).start()
    try:
        with kit.writers(rows=1000, count=3) as writers:
            dump_id = pipeline.dump(kit.tables)
            wait_until(lambda: dump_state(pipeline, dump_id) == "done", 300, "the dump")
            wait_until(lambda: writers.committed > 100, 60, "100 writer transactions")
        assert not writers.errors, writers.errors
        _catch_up(pipeline, kit)
    finally:
        pipeline.stop()
    assert assert_equal_to_source(kit, replica) > 1500
    stored = sum(len(replica.stored(TableId.parse(t))) for t in kit.tables)
    live = sum(len(replica.live(TableId.parse(t))) for t in kit.tables)
    assert stored > live, "no tombstone was kept: the writers' deletes did not reach it"


def _child(kit: Kit, target: Target, state: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as handle:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.integration.test_replica_outputs_child", kit.kind,
             kit.dsn, json.dumps({**target.config(), "pipeline": "crash"}), str(state)],
            stdout=handle, stderr=subprocess.STDOUT, cwd=Path(__file__).parents[2],
            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _progress(state: Path) -> tuple[int, str] | None:
    stored = FileStateStore(state).load()
    if stored is None:
        return None
    dumps = [d for d in state_from_json(stored.data).dumps.dumps if not d.internal]
    return (dumps[0].chunks, dumps[0].state.value) if dumps else None


@pytest.mark.parametrize("replica", ["sqlite", "delta"], indirect=True)
def test_sigkill_during_dump_and_stream_loses_nothing(kit: Kit, replica: Target,
                                                      tmp_path: Path) -> None:
    kit.create_schema(rows=3000)
    state, log = tmp_path / "state.json", tmp_path / "capture.log"
    rng = random.Random(11)
    kills_mid_dump = 0
    with kit.writers(rows=3000, count=2) as writers:
        for _ in range(5):
            proc = _child(kit, replica, state, log)
            # kill at a random moment once the capture committed dump progress (its start-up
            # takes seconds on a loaded machine, and unpaced writers' log events come first):
            # during the dump while it lasts, in the stream after it
            wait_until(lambda: (_progress(state) or (0, ""))[0] > 0, 120,
                       "the capture to commit a chunk")
            time.sleep(rng.uniform(0.2, 2.5))
            progress = _progress(state)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            kills_mid_dump += progress is not None and progress[1] != "done" and progress[0] > 0
        proc = _child(kit, replica, state, log)
        try:
            wait_until(lambda: (_progress(state) or (0, ""))[1] == "done", 300,
                       "the dump to finish after the kills")
            writers.stop()
            target = kit.current_position()

            def caught_up() -> bool:
                stored = FileStateStore(state).load()
                position = state_from_json(stored.data).position if stored else None
                return isinstance(position, type(target)) and position >= target

            wait_until(caught_up, 180, "the capture to catch up")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    assert not writers.errors, writers.errors
    assert kills_mid_dump >= 2, f"only {kills_mid_dump} kills hit the dump: " \
        f"{log.read_text()[-3000:]}"
    assert assert_equal_to_source(kit, replica) > 4000


# -- replays, duplicated chunks and an out-of-order delete/insert pair -------------------------

T = TableId("public", "items")
ITEMS = TableInfo(T, (ColumnInfo("id", "integer"), ColumnInfo("v", "text")), ("id",))


def _txn(base: int, *changes: tuple[Op, int, str | None]) -> list[ChangeEvent]:
    events = [ChangeEvent(Op.BEGIN, None, position=lsn(base))]
    for i, (op, key, value) in enumerate(changes, 1):
        after = None if value is None else {"id": key, "v": value}
        events.append(ChangeEvent(op, T, (key,), after=after, position=lsn(base + i)))
    return [*events, ChangeEvent(Op.COMMIT, None, position=lsn(base + 0x80))]


def _chunk(high: int, rows: dict[int, str]) -> list[ChangeEvent]:
    return [ChangeEvent(Op.READ, T, (k,), after={"id": k, "v": v}, position=lsn(high),
                        dump_id="d") for k, v in sorted(rows.items())]


def replay_stream() -> tuple[list[ChangeEvent], int]:
    """The stream, and where the replayed suffix of the scenario stops (before the delete)."""
    events = [*_txn(0x100, (Op.INSERT, 1, "one"), (Op.INSERT, 2, "two")),
              *_chunk(0x200, {1: "one", 2: "two", 3: "three"}),
              *_txn(0x300, (Op.UPDATE, 2, "two'"), (Op.INSERT, 4, "four")),
              *_txn(0x400, (Op.DELETE, 1, None), (Op.DELETE, 3, None)),
              *_txn(0x500, (Op.UPDATE, 4, "four'"))]
    for seq, event in enumerate(events, 1):
        event.seq = seq
    stop = next(i for i, e in enumerate(events) if e.op is Op.DELETE) - 1  # at the BEGIN
    return events, stop


FINAL = {(2,): {"id": 2, "v": "two'"}, (4,): {"id": 4, "v": "four'"}}


def run_replays(target: Target) -> None:
    """Everything applied; a restart replays the suffix from the start (a committed state
    behind this output), with the chunk twice, up to just before the deletes (a second
    crash): rows 1 and 3 must not come back and 2 and 4 must not go back; then the rest."""
    events, stop = replay_stream()
    output = target.new_output()
    output.open(0)
    output.write(events)
    assert output.flush() == len(events)
    assert target.live(T) == FINAL
    output.close()
    replayed = target.new_output()
    replayed.open(0)
    chunk = [e for e in events if e.op is Op.READ]
    replayed.write(events[:stop])
    replayed.write(chunk)  # a duplicated chunk, read before the later changes
    replayed.flush()
    assert target.live(T) == FINAL, "a replayed suffix resurrected or regressed rows"
    replayed.write(events[stop:])
    replayed.flush()
    assert target.live(T) == FINAL


@pytest.fixture(params=TARGETS)
def items_target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    yield from target_fixture(request.param, request, tmp_path, static_lookup(ITEMS))


def test_replays_neither_resurrect_nor_regress(items_target: Target) -> None:
    run_replays(items_target)
    assert items_target.stored(T) == {(1,): True, (2,): False, (3,): True, (4,): False}


def _unguarded(replica: ReplicaTable, dialect: str, new: str) -> str:
    """The guard condition removed (test-side): every change overwrites the stored row."""
    return "1 = 1"


def test_the_replay_test_fails_with_the_guard_removed(items_target: Target,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    if isinstance(items_target, SqlTarget):
        monkeypatch.setattr(sql_write, "guard_condition", _unguarded)
    else:
        assert isinstance(items_target, DeltaTarget)
        monkeypatch.setattr(delta_table, "NEWER", "1 = 1")
    with pytest.raises(AssertionError, match="resurrected or regressed"):
        run_replays(items_target)
    assert (1,) in items_target.live(T), "without the guard the deleted row 1 came back"


# -- faults ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("server", ["postgres", "mariadb"])
def test_target_restarted_mid_stream_pauses_and_loses_nothing(
        server: str, pg_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The target server goes down for a few seconds while writers run: the output's flushes
    fail (retryable), capture waits and resumes; the replica ends equal to the source."""
    from dblog.harness.mariadb import start_mariadb
    from dblog.harness.postgres import start_postgres

    source = Kit("postgres", pg_dsn)
    source.create_schema(rows=500)
    running = start_postgres() if server == "postgres" else start_mariadb()
    reader = source.chunk_reader()
    if server == "postgres":
        url = pg_url(running.dsn())
    else:
        url = maria_url(running.dsn())
        admin = sa.create_engine(url)
        with admin.begin() as conn:
            conn.execute(sa.text("CREATE DATABASE replica"))
        admin.dispose()
        url = maria_url(running.dsn("replica"))
    target = SqlTarget(server, url, source_lookup(reader))
    pipeline = _pipeline(source, target.new_output(pipeline="restart"), tmp_path).start()
    try:
        with source.writers(rows=500, count=2) as writers:
            dump_id = pipeline.dump(source.tables)
            wait_until(lambda: dump_state(pipeline, dump_id) == "done", 300, "the dump")
            running.restart(down_s=4.0)
            wait_until(lambda: writers.committed > 200, 120, "writes after the restart")
        _catch_up(pipeline, source, timeout=240)
        assert pipeline.is_running()
        retried = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
        assert any(m.startswith("flush sql:") for m in retried), "the outage missed the output"
    finally:
        pipeline.stop()
    try:
        assert assert_equal_to_source(source, target) > 500
    finally:
        reader.close()
        target.close()
        running.stop()


def test_an_incompatible_existing_table_stops_the_pipeline_with_the_fix(
        pg_dsn: str, tmp_path: Path) -> None:
    source = Kit("postgres", pg_dsn)
    source.create_int_table(20)
    reader = source.chunk_reader()
    target = SqlTarget("sqlite", f"sqlite:///{tmp_path / 'r.db'}", source_lookup(reader))
    target.execute("CREATE TABLE t_int (id INTEGER PRIMARY KEY, ver TEXT, v TEXT, "
                   "_dblog_major BIGINT NOT NULL, _dblog_minor BIGINT NOT NULL, "
                   "_dblog_deleted BOOLEAN NOT NULL)")
    pipeline = _pipeline(source, target.new_output(), tmp_path).start()
    try:
        pipeline.dump([source.table("t_int")])
        with pytest.raises(FatalOutputError) as raised:
            pipeline.join(120)
        error = raised.value
        assert "column ver is TEXT" in error.message and "int values" in error.message
        assert error.fix is not None and "BIGINT" in error.fix and "drop the table" in error.fix
    finally:
        pipeline.request_stop()  # stopped already; stop() would raise its error again
        reader.close()
        target.close()

