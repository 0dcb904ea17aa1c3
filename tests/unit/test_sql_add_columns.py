"""Columns the source added reach the SQL replica's table *and* its view, whatever fails
between the DDL statements (review findings, both failed before the fix):

- the view was rebuilt in a transaction after the ALTER TABLE's; a crash or a retryable error
  between the two left the view without the column for good (``ensure`` rebuilt only a
  missing view, the output's evolution acted only on columns the table lacked);
- each ALTER TABLE commits by itself on SQLite (pysqlite opens no transaction before DDL) and
  on MySQL/MariaDB (implicit commit): when the second of two failed for now, the retry added
  the first again, "duplicate column", and a transient error stopped the pipeline."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from dblog.core.model import ChangeEvent, Op, TableId, TableInfo
from dblog.errors import RetryableOutputError
from dblog.outputs import sql_schema
from tests.contract.test_replica_output_contract import B, _numbered
from tests.replica_targets import SqlTarget, int_info
from tests.unit.test_replica_sim import lsn


class Killed(BaseException):
    """Stands for SIGKILL at that point (nothing after it runs)."""


def _insert(key: int, txn: int, **values: object) -> list[ChangeEvent]:
    base = 0x100 * txn
    return [ChangeEvent(Op.BEGIN, None, position=lsn(base)),
            ChangeEvent(Op.INSERT, B, (key,), position=lsn(base + 1),
                        after={"id": key, "v": txn, "blob": "b", **values}),
            ChangeEvent(Op.COMMIT, None, position=lsn(base + 2))]


def _busy() -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError("database is locked")
    exc.sqlite_errorcode = sqlite3.SQLITE_BUSY
    return exc


def _started(tmp_path: Path, *added: str) -> tuple[SqlTarget, dict[TableId, TableInfo],
                                                   list[ChangeEvent], Any]:
    """An output that wrote row 1; the source then added ``added`` (row 2 has them)."""
    infos: dict[TableId, TableInfo] = {B: int_info(B)}
    target = SqlTarget("sqlite", f"sqlite:///{tmp_path / 'replica.db'}", infos.get)
    events = _numbered([_insert(1, 1), _insert(2, 2, **{c: c.upper() for c in added})])
    out = target.new_output()
    out.open(0)
    out.write(events[:3])
    assert out.flush() == 3
    infos[B] = int_info(B, *added)  # the source's ALTER TABLE ... ADD COLUMN
    return target, infos, events, out


def test_the_view_gets_a_column_added_before_a_crash_that_missed_the_view(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target, _infos, events, out = _started(tmp_path, "extra")
    real = sql_schema.create_view
    calls = {"n": 0}

    def dying(engine: sa.Engine, replica: sql_schema.ReplicaTable) -> None:
        calls["n"] += 1
        raise Killed()  # the process dies after the ALTER committed, before the view

    monkeypatch.setattr(sql_schema, "create_view", dying)
    out.write(events[3:])
    with pytest.raises(Killed):
        out.flush()
    assert calls["n"] == 1
    monkeypatch.setattr(sql_schema, "create_view", real)

    restarted = target.new_output()  # restart: the engine replays from seq 3
    restarted.open(3)
    restarted.write(events[3:])
    assert restarted.flush() == 6
    assert target._select("SELECT extra FROM b WHERE id = 2") == [{"extra": "EXTRA"}]
    assert target.live(B) == {(1,): {"id": 1, "v": 1, "blob": "b", "extra": None},
                              (2,): {"id": 2, "v": 2, "blob": "b", "extra": "EXTRA"}}
    target.close()


def test_the_view_gets_the_column_when_its_rebuild_failed_for_now(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No restart: the view's rebuild fails once (SQLITE_BUSY), the engine retries the flush."""
    target, _infos, events, out = _started(tmp_path, "extra")
    real = sql_schema.create_view
    state = {"failed": False}

    def busy_once(engine: sa.Engine, replica: sql_schema.ReplicaTable) -> None:
        if not state["failed"]:
            state["failed"] = True
            raise _busy()
        real(engine, replica)

    monkeypatch.setattr(sql_schema, "create_view", busy_once)
    out.write(events[3:])
    with pytest.raises(RetryableOutputError):
        out.flush()
    assert out.flush() == 6  # the engine's retry
    assert target.live(B)[(2,)] == {"id": 2, "v": 2, "blob": "b", "extra": "EXTRA"}
    target.close()


def test_a_transient_error_between_two_added_columns_is_retried(tmp_path: Path) -> None:
    target, _infos, events, out = _started(tmp_path, "c1", "c2")
    alters = {"n": 0}

    @sa.event.listens_for(out._engine, "before_cursor_execute")
    def busy_on_second_alter(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("ALTER TABLE"):
            alters["n"] += 1
            if alters["n"] == 2:
                raise _busy()

    out.write(events[3:])
    with pytest.raises(RetryableOutputError):
        out.flush()
    assert target._select("SELECT c1 FROM b") == [{"c1": None}]  # the first ALTER stayed
    assert out.flush() == 6  # the engine's retry: was 'duplicate column name: c1', fatal
    assert alters["n"] == 3  # c2 only
    assert target.live(B)[(2,)] == {"id": 2, "v": 2, "blob": "b", "c1": "C1", "c2": "C2"}
    target.close()


def test_a_dropped_source_column_stays_in_the_view_when_another_is_added(
        tmp_path: Path) -> None:
    """The view lists the table's columns: one the source dropped (absent from the metadata
    after a restart) stays visible, as docs/outputs/sql.md says, after the view is rebuilt."""
    target, infos, events, out = _started(tmp_path, "gone")
    out.write(events[3:])
    assert out.flush() == 6
    infos[B] = int_info(B, "fresh")  # the source dropped "gone", then added "fresh"
    later = _insert(3, 3, fresh="f")
    for seq, event in enumerate(later, 7):
        event.seq = seq
    restarted = target.new_output()
    restarted.open(6)
    restarted.write(later)
    assert restarted.flush() == 9
    assert target._select("SELECT id, gone, fresh FROM b_live ORDER BY id") == [
        {"id": 1, "gone": None, "fresh": None}, {"id": 2, "gone": "GONE", "fresh": None},
        {"id": 3, "gone": None, "fresh": "f"}]
    target.close()
