"""The Spark output's fence reads a table's transaction for its pipeline from the newest commit
file when that commit carries one (``spark_target.newest_txn``), instead of the snapshot's
state: it must answer what the state answers, for every pipeline sharing the table (the
checkpoint table is shared), and leave every other case to the state."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dblog.outputs.spark_session import jvm
from dblog.outputs.spark_target import Fence, SparkDeltaTable, newest_txn

if TYPE_CHECKING:
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
