"""The Spark output's Delta sink stores a truncate's barrier in the checkpoint row before the
truncate's DELETE (which leaves no tombstones), and deletes again below every stored barrier
when it opens (a crash between the two): checked without a JVM, on a session that records
the SQL it is given. The crash itself, with real jars: tests/integration/
test_spark_output_contract.py."""

from __future__ import annotations

from typing import Any

import pytest

from dblog.core.model import TableId
from dblog.outputs import spark_delta
from dblog.outputs.spark_config import SparkDeltaSink
from dblog.outputs.spark_delta import Replica, SparkDeltaWriter
from dblog.outputs.spark_target import SparkDeltaTable
from dblog.outputs.sql_checkpoint import StoredCheckpoint
from dblog.outputs.sql_kinds import kinds_of
from dblog.replica import Guard, TablePlan
from tests.replica_targets import int_info

A, B = TableId("s", "a"), TableId("s", "b")
BELOW = "_dblog_major < 5 OR (_dblog_major = 5 AND _dblog_minor < 1)"


class Recorded:
    def collect(self) -> list[Any]:
        return []


class Session:
    """Records each statement in ``log``."""

    def __init__(self, log: list[tuple[str, Any]]) -> None:
        self.log = log

    def sql(self, statement: str) -> Recorded:
        self.log.append(("sql", statement))
        return Recorded()


class Fence:
    pipeline, epoch = "p", 1

    def __init__(self, log: list[tuple[str, Any]]) -> None:
        self.log = log

    def check(self, table: SparkDeltaTable) -> Any:
        return type("Snap", (), {"key": None})()

    def commit(self, table: SparkDeltaTable, seq: int, action: Any) -> Any:
        self.log.append(("commit", seq))
        return action()


def _writer(log: list[tuple[str, Any]]) -> SparkDeltaWriter:
    writer = SparkDeltaWriter(Session(log), SparkDeltaSink(path="/r"),  # type: ignore[arg-type]
                              lambda t: None, "p", 1)
    writer.fence = Fence(log)  # type: ignore[assignment]
    return writer


def test_the_barrier_is_stored_before_the_truncates_delete(
        monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[tuple[str, Any]] = []
    writer = _writer(log)
    ckpt = writer.checkpoint
    assert ckpt is not None
    ckpt.stored = ("pg", {B: Guard(1, 1)})

    def write(covered: Any, scheme: str | None, barriers: dict[TableId, Guard],
              seq: int) -> None:
        log.append(("row", (covered, scheme, barriers, seq)))
        ckpt.stored = (scheme, barriers)

    monkeypatch.setattr(ckpt, "write", write)
    table = SparkDeltaTable(writer.spark, "delta.`/r/s.a`", "/r/s.a")
    writer.replicas[A] = Replica(A, table, kinds_of(int_info(A)), ("id",))
    writer.apply(TablePlan(A, Guard(5, 1), ()), 12)
    writer.apply(TablePlan(A, Guard(5, 1), ()), 13)  # a retried flush: the row holds it
    delete = ("sql", f"DELETE FROM delta.`/r/s.a` WHERE {BELOW}")
    assert log == [("row", (None, "pg", {B: Guard(1, 1), A: Guard(5, 1)}, 12)),
                   ("commit", 12), delete, ("commit", 13), delete]


def test_open_deletes_again_below_each_stored_barrier(monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[tuple[str, Any]] = []
    writer = _writer(log)
    stored = StoredCheckpoint(1, 6, None, "pg", {A: Guard(5, 1), B: Guard(9, 0)})
    assert writer.checkpoint is not None
    monkeypatch.setattr(writer.checkpoint, "open", lambda reopen: stored)
    monkeypatch.setattr(writer, "_existing", lambda: ["s.a"])  # s.b has no table (yet)
    monkeypatch.setattr(spark_delta, "check_layout", lambda *args: None)
    assert writer.open() is stored
    assert log == [("commit", 6), ("sql", f"DELETE FROM delta.`/r/s.a` WHERE {BELOW}")]
