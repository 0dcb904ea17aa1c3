"""The Spark output's fence reads a table's transaction for its pipeline from the newest commit
file when that commit carries one (``spark_target.newest_txn``), instead of the snapshot's
state: it must answer what the state answers, for every pipeline sharing the table (the
checkpoint table is shared), and leave every other case to the state.

A table a deposed leader creates after its successor opened is claimed by the successor at
its first use, before it reads the greatest key: the deposed leader's append cannot land
between that read and the successor's append (each key twice)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dblog.core.model import ColumnInfo, TableId, TableInfo
from dblog.errors import LeadershipLost
from dblog.outputs.spark_config import SparkDeltaSink
from dblog.outputs.spark_delta import SparkDeltaWriter
from dblog.outputs.spark_session import jvm
from dblog.outputs.spark_target import Fence, SparkDeltaTable, newest_txn

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration,
              pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning")]


def _log(spark: SparkSession, table: SparkDeltaTable) -> tuple[Any, int]:
    view = jvm(spark)
    session: Any = spark
    log = view.org.apache.spark.sql.delta.DeltaLog.forTable(session._jsparkSession,
                                                           table.location)
    none = view.scala.Option.empty()
    return log, int(log.update(False, none, none).version())


def _state_txn(spark: SparkSession, table: SparkDeltaTable, app: str) -> int | None:
    """The transaction as the snapshot's state (a log replay) holds it."""
    log, _ = _log(spark, table)
    view = jvm(spark)
    none = view.scala.Option.empty()
    found = log.update(False, none, none).transactions().get(app)
    return int(found.get()) if found.isDefined() else None


def test_the_newest_commit_answers_as_the_state_for_each_pipeline(
        spark_session: SparkSession, tmp_path: Path) -> None:
    spark = spark_session
    table = SparkDeltaTable.at_path(spark, str(tmp_path / "t"))
    spark.createDataFrame([(0,)], "id bigint").write.format("delta").save(table.location)
    a, b = Fence(spark, "a", 1), Fence(spark, "b", 2)

    def append() -> None:
        spark.createDataFrame([(1,)], "id bigint").write.format("delta").mode("append") \
            .save(table.location)

    def newest(fence: Fence) -> int | None:
        log, version = _log(spark, table)
        return newest_txn(log, version, fence.app)

    def agree() -> None:
        for fence in (a, b):
            assert table.snapshot(fence.app).txn == _state_txn(spark, table, fence.app)

    assert newest(a) is None  # the first commit carries no transaction
    a.commit_blind(table, 7, append)
    assert newest(a) == a._last[table.location] == _state_txn(spark, table, a.app)
    assert newest(b) is None
    agree()
    b.commit_blind(table, 3, append)  # the newest commit is b's: a's comes from the state
    assert newest(b) == b._last[table.location] == _state_txn(spark, table, b.app)
    assert newest(a) is None and _state_txn(spark, table, a.app) == a._last[table.location]
    agree()
    append()  # a commit without any transaction
    assert newest(a) is None and newest(b) is None
    agree()
    a.commit_blind(table, 8, append)
    assert newest(a) == a._last[table.location] == (1 << 40) | 8
    agree()


T = TableId("public", "t")
INFO = TableInfo(T, (ColumnInfo("id", "bigint"), ColumnInfo("v", "bigint")), ("id",))


def test_a_table_created_after_open_is_claimed_before_its_greatest_key_is_read(
        spark_session: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Old leader O (epoch 1) is mid-flush; new leader N (epoch 2) opens (T does not exist
    yet); O creates T; N's first flush into T reads the greatest key (none) and, just before
    its append, O's append of the same keys comes: it must be refused, and T hold each key
    once."""
    from dblog.replica import Guard, TablePlan
    from dblog.replica.reduce import RowChange

    sink = SparkDeltaSink(path=str(tmp_path / "lake"))

    def writer(epoch: int) -> SparkDeltaWriter:
        out = SparkDeltaWriter(spark_session.newSession(), sink,
                               lambda t: INFO if t == T else None, "p", epoch)
        out.open()
        return out

    old, new = writer(1), writer(2)
    plan = TablePlan(T, None, tuple(RowChange((i,), Guard(100, i), {"id": i, "v": i}, seq=i)
                                    for i in (1, 2, 3)))
    old._replica(T)  # the deposed leader's flush, begun before it lost, creates T
    refused: list[LeadershipLost] = []
    append = new._append

    def late(replica: Any, source: pa.Table, seq: int, added: bool) -> dict[str, Any]:
        try:  # the deposed leader's append lands after new read the greatest key
            old.apply(plan, 10)
        except LeadershipLost as exc:
            refused.append(exc)
        return append(replica, source, seq, added)

    monkeypatch.setattr(new, "_append", late)
    new.apply(plan, 10)
    assert new.metrics and new.metrics[-1].get("appended")
    frame = spark_session.read.format("delta").load(str(tmp_path / "lake" / "public.t"))
    assert frame.count() == frame.select("id").distinct().count() == 3
    assert refused, "the deposed leader's append was not refused"
