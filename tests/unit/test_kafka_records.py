"""Planning Kafka records: transaction markers on the transaction topic carry the format's
marker record, and a format without markers (canal-json) sends none (not an empty value)."""

from __future__ import annotations

import orjson
import pytest

from dblog.core.model import ChangeEvent, ColumnInfo, Op, TableId, TableInfo
from dblog.formats.base import format_by_name
from dblog.outputs.kafka_records import RecordPlanner

OPTIONS = {"native": {}, "debezium-json": {"connector": "postgresql"}, "canal-json": {}}


def _planner(fmt: str, transaction_topic: str | None = "tx") -> RecordPlanner:
    return RecordPlanner(format_by_name(fmt, OPTIONS[fmt]), "{prefix}.{schema}.{table}",
                         {"prefix": "p"}, transaction_topic, True, lambda topic: 1,
                         lambda table: None)


@pytest.mark.parametrize("fmt", ["native", "debezium-json"])
def test_markers_go_to_the_transaction_topic_with_a_value(fmt: str) -> None:
    planner = _planner(fmt)
    begin = ChangeEvent(Op.BEGIN, None, txid=7, seq=1)
    commit = ChangeEvent(Op.COMMIT, None, txid=7, seq=2)
    records = planner.plan(begin) + planner.plan(commit)
    assert [(r.topic, r.partition, r.seq) for r in records] == [("tx", 0, 1), ("tx", 0, 2)]
    for record in records:
        assert record.value and orjson.loads(record.value)


def test_a_format_without_markers_sends_nothing_to_the_transaction_topic() -> None:
    planner = _planner("canal-json")
    assert planner.plan(ChangeEvent(Op.BEGIN, None, txid=7, seq=1)) == []
    assert planner.plan(ChangeEvent(Op.COMMIT, None, txid=7, seq=2)) == []


def test_without_a_transaction_topic_markers_send_nothing() -> None:
    assert _planner("native", None).plan(ChangeEvent(Op.BEGIN, None, txid=7, seq=1)) == []


@pytest.mark.parametrize("tombstones", [True, False])
def test_a_key_change_deletes_the_old_key_with_or_without_tombstones(tombstones: bool) -> None:
    """``tombstones`` decides the null records only: the old key's delete is always sent, or a
    consumer keyed by the old key (a compacted topic, a KTable) keeps the old row."""
    planner = RecordPlanner(format_by_name("native", {}), "{prefix}.{schema}.{table}",
                            {"prefix": "p"}, None, tombstones, lambda topic: 1,
                            lambda table: None)
    event = ChangeEvent(Op.UPDATE, TableId("public", "t"), (2,), before={"id": 1},
                        after={"id": 2}, old_key=(1,), seq=5)
    records = planner.plan_batch([event])
    shape = [(r.key, None if r.value is None else orjson.loads(r.value)["op"])
             for r in records]
    expected = [(b"[1]", "delete"), (b"[1]", None), (b"[2]", "update")] if tombstones else \
        [(b"[1]", "delete"), (b"[2]", "update")]
    assert shape == expected


def test_rows_of_a_table_without_a_key_go_once_to_partition_zero() -> None:
    """Only table-level events (truncate) are copied to every partition; a keyless row is one
    record, in partition 0 (the table's rows in order), and a delete gets no tombstone."""
    planner = RecordPlanner(format_by_name("native", {}), "{prefix}.{schema}.{table}",
                            {"prefix": "p"}, None, True, lambda topic: 3, lambda table: None)
    table = TableId("public", "log")
    insert = ChangeEvent(Op.INSERT, table, None, after={"v": 1}, seq=1)
    delete = ChangeEvent(Op.DELETE, table, None, before={"v": 1}, seq=2)
    truncate = ChangeEvent(Op.TRUNCATE, table, seq=3)
    records = planner.plan_batch([insert, delete, truncate])
    assert [(r.seq, r.key, r.partition, r.value is None) for r in records] == [
        (1, None, 0, False), (2, None, 0, False),
        (3, None, 0, False), (3, None, 1, False), (3, None, 2, False)]


@pytest.mark.parametrize(("fmt", "options", "tombstone"), [
    ("native", {}, True), ("canal-json", {"connector": "postgresql"}, False),
    ("debezium-json", {"connector": "postgresql"}, True),
    ("debezium-json", {"connector": "postgresql", "tombstones": False}, False)])
@pytest.mark.parametrize("transport", [True, False])
def test_a_delete_has_a_tombstone_when_the_transport_and_the_format_allow_it(
        fmt: str, options: dict[str, object], tombstone: bool, transport: bool) -> None:
    planner = RecordPlanner(format_by_name(fmt, options), "{prefix}.{schema}.{table}",
                            {"prefix": "p"}, None, transport, lambda topic: 1,
                            lambda table: TableInfo(table, (ColumnInfo("id", "integer"),),
                                                    ("id",)))
    delete = ChangeEvent(Op.DELETE, TableId("public", "t"), (1,), before={"id": 1}, seq=4)
    values = [r.value is None for r in planner.plan_batch([delete])]
    assert values == ([False, True] if tombstone and transport else [False])
