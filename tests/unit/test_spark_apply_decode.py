"""The apply job's decode() without a JVM: a tombstone (null value) is the delete of its key in
its topic's table, since a compacted topic can keep only the tombstone; a record that is not a
dblog native document (debezium-json, canal-json, not JSON) is one FatalOutputError naming the
topic, partition and offset; run_apply raises a micro-batch's own DblogError, not Spark's
wrapper with a generic fix."""

from __future__ import annotations

import threading
from typing import Any

import orjson
import pytest

from dblog.core.model import Op, TableId
from dblog.errors import FatalOutputError
from dblog.outputs import spark_apply
from dblog.outputs.spark_apply import decode
from dblog.outputs.spark_apply_config import ApplyConfig, ApplyKafka
from dblog.outputs.spark_config import SparkDeltaSink

T = TableId("public", "t")


def _row(p: int, o: int, doc: object, key: object = None, topic: str = "shop.public.t",
         raw: bytes | None = None) -> dict[str, object]:
    value = raw if raw is not None else None if doc is None else orjson.dumps(doc)
    return {"topic": topic, "partition": p, "offset": o,
            "key": None if key is None else orjson.dumps(key), "value": value}


def _ins(i: int) -> dict[str, Any]:
    return {"seq": i, "op": "insert", "schema": "public", "table": "t", "key": [i],
            "after": {"id": i}}


def test_debezium_json_records_are_refused_naming_the_format_and_place() -> None:
    dbz = {"before": None, "after": {"id": 1, "v": "a"}, "op": "c", "ts_ms": 1, "seq": 7,
           "source": {"connector": "postgresql", "db": "shop", "schema": "public",
                      "table": "t", "lsn": 123}, "transaction": None}
    with pytest.raises(FatalOutputError) as raised:
        decode([_row(2, 9, dbz, {"id": 1})])
    assert "debezium-json" in raised.value.message and "format: native" in raised.value.message
    assert "topic shop.public.t partition 2 offset 9" in raised.value.message


def test_canal_json_record_is_a_classified_error() -> None:
    canal = {"data": [{"id": "1", "v": "a"}], "database": "public", "es": 1, "id": 7,
             "isDdl": False, "mysqlType": {}, "old": None, "pkNames": ["id"], "seq": 7,
             "sql": "", "sqlType": {}, "table": "t", "ts": 1, "type": "INSERT"}
    with pytest.raises(FatalOutputError, match=r"canal-json record.*format: native"):
        decode([_row(0, 0, canal)])


def test_a_bad_record_is_a_classified_error() -> None:
    with pytest.raises(FatalOutputError, match="partition 0 offset 5 is not JSON"):
        decode([_row(0, 5, None, raw=b"not json")])


def test_markers_and_checkpoint_records_are_left_out() -> None:
    begin = {"seq": 1, "op": "begin"}
    checkpoint = {"pipeline": "shop", "epoch": 1, "seq": 3, "state": {}}
    assert decode([_row(0, 0, begin), _row(0, 1, checkpoint)]) == []


def test_a_tombstone_is_the_delete_of_its_key_in_its_topics_table() -> None:
    topics: dict[str, TableId] = {}
    decode([_row(0, 0, _ins(1), [1])], topics)  # an earlier batch of the run
    (record,) = decode([_row(0, 2, None, [1])], topics)
    assert (record.partition, record.offset, record.table) == (0, 2, T)
    event = record.event()
    assert (event.op, event.key) == (Op.DELETE, (1,))


def test_a_tombstone_of_an_unseen_topic_takes_the_template_or_fails_naming_it() -> None:
    kafka = ApplyKafka(bootstrap_servers="x", topics=["shop.public.t"],
                       topic="shop.{schema}.{table}")
    (record,) = decode([_row(1, 4, None, [7])], {}, kafka.table_of)
    assert record.table == T and record.event().key == (7,)
    with pytest.raises(FatalOutputError, match=r"topic shop\.public\.t partition 1 offset 4") \
            as raised:
        decode([_row(1, 4, None, [7])])
    assert raised.value.fix is not None and "kafka.topic" in raised.value.fix
    with pytest.raises(FatalOutputError, match="not a native key"):
        decode([_row(0, 0, _ins(1), [1]), _row(0, 1, None, {"id": 1})])


def test_the_topic_template_names_schema_and_table() -> None:
    with pytest.raises(ValueError, match=r"\{schema\} and \{table\}"):
        ApplyKafka(bootstrap_servers="x", topics=["a"], topic="{prefix}.{schema}.{table}")


class _Query:
    isActive = False

    def exception(self) -> str:
        return "StreamingQueryException: ... FatalOutputError ..."


def test_run_apply_raises_the_batchs_own_error(monkeypatch: pytest.MonkeyPatch) -> None:
    own = FatalOutputError("spark-apply: the record at ... is not JSON", fix="the own fix")

    class Job:
        failure = own

        def __init__(self, *_: object) -> None: ...
        def open(self) -> None: ...
        def start(self) -> _Query:
            return _Query()
        def stop(self) -> None: ...

    monkeypatch.setattr(spark_apply, "ApplyJob", Job)
    config = ApplyConfig(kafka=ApplyKafka(bootstrap_servers="x", topics=["a"]),
                         delta=SparkDeltaSink(path="/nowhere"), checkpoint_location="/ck")
    with pytest.raises(FatalOutputError) as raised:
        spark_apply.run_apply(config, stop=threading.Event())
    assert raised.value is own
    Job.failure = None  # type: ignore[assignment]
    with pytest.raises(FatalOutputError, match="the Spark apply job failed"):
        spark_apply.run_apply(config, stop=threading.Event())
