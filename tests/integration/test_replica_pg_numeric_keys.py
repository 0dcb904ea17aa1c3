"""A PostgreSQL ``numeric`` key whose scale changes (``1.5`` to ``1.50``: one value to
PostgreSQL, two texts to the events) reaches a SQL replica as the source has it.

PostgreSQL logs such an update as a key change (it compares the key's stored bytes), so the
apply core writes a tombstone for ``"1.5"`` and an upsert of ``"1.50"`` with the same guard.
The replica must tell the two keys apart as the core does: a NUMERIC key column merges them
(the upsert met its own tombstone), so an unconstrained numeric key is stored as its exact
text, like on SQLite and MariaDB."""

from __future__ import annotations

from pathlib import Path

import pytest

from dblog.app.pipeline import Pipeline
from dblog.core.model import ChangeEvent, ColumnInfo, Op, TableId, TableInfo
from dblog.engine import EngineSettings
from dblog.errors import FatalOutputError
from dblog.outputs.sql import SqlOutput
from tests.integration.conftest import pg_admin_dsn, pg_dsn
from tests.replica_targets import SqlTarget, make_target, source_lookup, static_lookup
from tests.unit.test_replica_sim import lsn

from .pgutil import dump_state, wait_until
from .sources import Kit

pytestmark = pytest.mark.integration
__all__ = ["pg_admin_dsn", "pg_dsn"]
T = TableId("public", "nums")


def test_a_numeric_key_whose_scale_changes_stays_one_row(
        pg_dsn: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    source = Kit("postgres", pg_dsn)
    source.execute("CREATE TABLE nums (k numeric PRIMARY KEY, v int)")
    source.execute("INSERT INTO nums VALUES (1.5, 1), (2, 2), (3.10, 3), (4, 4)")
    reader = source.chunk_reader()
    target = make_target("postgres", request, tmp_path, source_lookup(reader))
    settings = EngineSettings(chunk_size=50, flush_interval_s=0.2, heartbeat_interval_s=1)
    pipeline = Pipeline(source.connector("nums", "nums"), [target.new_output(pipeline="nums")],
                        state_path=str(tmp_path / "state.json"), settings=settings).start()
    try:
        dump_id = pipeline.dump(["public.nums"])
        wait_until(lambda: dump_state(pipeline, dump_id) == "done", 60, "the dump")
        for sql in ("UPDATE nums SET k = 1.50 WHERE k = 1.5",  # more digits: 1.5 -> 1.50
                    "UPDATE nums SET v = 10 WHERE k = 1.5",  # the same row, by value
                    "UPDATE nums SET k = 3.1, v = 30 WHERE k = 3.10",  # fewer digits
                    "UPDATE nums SET k = 2.000 WHERE k = 2; DELETE FROM nums WHERE k = 2",
                    "UPDATE nums SET k = 4.0 WHERE k = 4; UPDATE nums SET k = 4 WHERE k = 4"):
            source.execute(f"BEGIN; {sql}; COMMIT")
        end = source.current_position()

        def caught_up() -> bool:
            pipeline.join(0)  # raises the error that stopped the pipeline, if one did
            position = pipeline.status()["committed_position"]
            return position is not None and source.parse_position(position) >= end

        wait_until(caught_up, 60, "the replica to catch up")
    finally:
        pipeline.stop()
    try:
        expected = {key: row for (_, key), row in source.source_rows(["public.nums"]).items()}
        assert expected == {("1.50",): {"k": "1.50", "v": 10}, ("3.1",): {"k": "3.1", "v": 30},
                            ("4",): {"k": "4", "v": 4}}
        assert target.live(T) == expected
    finally:
        target.close()
        reader.close()


OLD_TABLE = ("CREATE TABLE nums (k NUMERIC PRIMARY KEY, v BIGINT, _dblog_major BIGINT NOT NULL, "
             "_dblog_minor BIGINT NOT NULL, _dblog_deleted BOOLEAN NOT NULL); CREATE VIEW "
             "nums_live AS SELECT k, v FROM nums WHERE NOT _dblog_deleted")
"""The replica table as dblog created it before such keys were text."""


INFO = TableInfo(T, (ColumnInfo("k", "numeric"), ColumnInfo("v", "integer")), ("k",))
EVENTS = [ChangeEvent(Op.BEGIN, None, position=lsn(0x200), seq=1),
          ChangeEvent(Op.INSERT, T, ("1.50",), None, {"k": "1.50", "v": 1}, lsn(0x1F0), seq=2),
          ChangeEvent(Op.COMMIT, None, position=lsn(0x200), seq=3)]


def test_an_old_numeric_key_column_is_refused_with_the_fix(
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    info, events = INFO, EVENTS
    target = make_target("postgres", request, tmp_path, static_lookup(info))
    assert isinstance(target, SqlTarget)
    try:
        target.execute(OLD_TABLE)
        output = target.new_output()
        output.open(0)
        output.write(events)
        with pytest.raises(FatalOutputError, match="key column k is NUMERIC") as raised:
            output.flush()
        fix = raised.value.fix or ""
        assert fix.startswith("DROP VIEW nums_live; ALTER TABLE nums ALTER COLUMN k TYPE text")
        for statement in fix.split(" (dblog")[0].split("; "):
            target.execute(statement)  # the fix as the message gives it
        again = target.new_output()
        assert isinstance(again, SqlOutput)
        again.open(0)
        again.write(events)
        assert again.flush() == 3
        assert target.live(T) == {("1.50",): {"k": "1.50", "v": 1}}
    finally:
        target.close()


def test_dblog_check_reports_an_old_numeric_key_column_as_start_refuses_it(
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """``dblog check`` names the refusal, with the same message and fix, before a run; a
    captured table whose replica table does not exist yet gets nothing."""
    later = TableInfo(TableId("public", "later"), INFO.columns, ("k",))
    target = make_target("postgres", request, tmp_path, static_lookup(INFO, later))
    assert isinstance(target, SqlTarget)
    try:
        target.execute(OLD_TABLE)
        checker = target.new_output()
        assert isinstance(checker, SqlOutput)
        findings = checker.check_tables([INFO, later])
        output = target.new_output()
        output.open(0)
        output.write(EVENTS)
        with pytest.raises(FatalOutputError, match="key column k is NUMERIC") as raised:
            output.flush()
        assert [(f.level, f.message, f.fix) for f in findings] == [
            ("error", raised.value.message, raised.value.fix)]
        assert [f.level for f in checker.check_tables([later])] == ["ok"]
    finally:
        target.close()
