"""Spark's real connectors, from the jars scripts/setup.sh fetched, in one local session: Delta
writes and MERGEs through delta-spark, and spark-sql-kafka writes to and reads from the real
Kafka broker (including a ``read_committed`` read past an aborted transaction, which the Spark
apply job of dblog's Kafka topics relies on)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # re-export

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [
    pytest.mark.integration,
    # pyspark's collect() leaves its result socket for the garbage collector to close ("The
    # socket will be automatically closed when garbage-collected", pyspark/rdd.py), which
    # Python reports as a ResourceWarning; the warnings-are-errors setting would fail on it
    pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning"),
]

SCHEMA = "id LONG, name STRING, n INT"


def _topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"spark-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                            replication_factor=1)], operation_timeout=30)
    futures[name].result(timeout=30)
    return name


def test_delta_write_and_merge_through_delta_spark(
        spark_session: SparkSession, tmp_path: Path) -> None:
    from delta.tables import DeltaTable

    path = str(tmp_path / "people")
    spark_session.createDataFrame([(1, "ann", 1), (2, "bob", 1), (3, "cy", 1)], SCHEMA) \
        .write.format("delta").save(path)
    changes = spark_session.createDataFrame(
        [(2, "bob", 2), (3, None, -1), (4, "dee", 1)], SCHEMA)  # update, delete, insert
    (DeltaTable.forPath(spark_session, path).alias("t")
        .merge(changes.alias("s"), "t.id = s.id")
        .whenMatchedDelete(condition="s.n < 0")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsert(condition="s.n >= 0", values={
            "id": "s.id", "name": "s.name", "n": "s.n"})
        .execute())

    rows = spark_session.read.format("delta").load(path).orderBy("id").collect()
    assert [tuple(row) for row in rows] == [(1, "ann", 1), (2, "bob", 2), (4, "dee", 1)]
    history = DeltaTable.forPath(spark_session, path).history().orderBy("version").collect()
    assert [(row["version"], row["operation"]) for row in history] == [(0, "WRITE"),
                                                                        (1, "MERGE")]
    metrics = history[1]["operationMetrics"]
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsDeleted"],
            metrics["numTargetRowsInserted"]) == ("1", "1", "1")
    commits = sorted(p.name for p in (tmp_path / "people" / "_delta_log").glob("*.json"))
    assert commits == ["00000000000000000000.json", "00000000000000000001.json"]


def test_kafka_write_and_read_through_spark_sql_kafka(
        spark_session: SparkSession, kafka_bootstrap: str) -> None:
    topic = _topic(kafka_bootstrap, partitions=3)
    records = [(f"k{i}", json.dumps({"id": i, "op": "c"})) for i in range(20)]
    (spark_session.createDataFrame(records, "key STRING, value STRING").write.format("kafka")
        .option("kafka.bootstrap.servers", kafka_bootstrap).option("topic", topic).save())

    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "g-" + topic,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)])
    seen: dict[str, str] = {}
    deadline = time.monotonic() + 30
    try:
        while len(seen) < len(records) and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=100, timeout=0.5):
                assert message.error() is None, message.error()
                key, value = message.key(), message.value()
                assert isinstance(key, bytes) and isinstance(value, bytes), message
                seen[key.decode()] = value.decode()
    finally:
        consumer.close()
    assert seen == dict(records)  # what Spark wrote is on the broker, one record per key

    read = (spark_session.read.format("kafka").option("kafka.bootstrap.servers", kafka_bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest").load()
            .selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v", "partition"))
    rows = read.collect()
    assert sorted((row["k"], row["v"]) for row in rows) == sorted(records)
    assert {row["partition"] for row in rows} == {0, 1, 2}


def test_spark_read_committed_skips_an_aborted_transaction(
        spark_session: SparkSession, kafka_bootstrap: str) -> None:
    topic = _topic(kafka_bootstrap)
    producer = Producer({"bootstrap.servers": kafka_bootstrap,
                         "transactional.id": f"txn-{uuid.uuid4().hex[:10]}"})
    producer.init_transactions(30)
    for batch, commit in (([b"c1", b"c2"], True), ([b"a1"], False), ([b"c3"], True)):
        producer.begin_transaction()
        for value in batch:
            producer.produce(topic, value=value)
        assert producer.flush(30) == 0
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    def values(isolation: str) -> list[str]:
        frame = (spark_session.read.format("kafka")
                 .option("kafka.bootstrap.servers", kafka_bootstrap)
                 .option("kafka.isolation.level", isolation).option("subscribe", topic)
                 .option("startingOffsets", "earliest").load())
        return [row["v"] for row in frame.orderBy("offset")
                .selectExpr("CAST(value AS STRING) AS v").collect()]

    assert values("read_committed") == ["c1", "c2", "c3"]
    assert values("read_uncommitted") == ["c1", "c2", "a1", "c3"]


def test_connector_jars_missing_or_built_for_another_spark_are_refused(tmp_path: Path) -> None:
    import pyspark

    from dblog.harness.postgres import HarnessError
    from dblog.harness.spark import spark_jars

    for name in ("delta-spark_2.12-3.3.2.jar", "delta-storage-3.3.2.jar",
                 "spark-token-provider-kafka-0-10_2.12-3.4.0.jar", "kafka-clients-3.4.1.jar"):
        (tmp_path / name).write_bytes(b"")
    with pytest.raises(HarnessError) as missing:
        spark_jars(tmp_path)
    assert "['spark-sql-kafka-0-10_2.12-', 'commons-pool2-']" in str(missing.value)
    assert "scripts/setup.sh" in str(missing.value)

    for name in ("spark-sql-kafka-0-10_2.12-3.4.0.jar", "commons-pool2-2.11.1.jar"):
        (tmp_path / name).write_bytes(b"")
    with pytest.raises(HarnessError) as mismatch:
        spark_jars(tmp_path)
    assert f"not spark-sql-kafka-0-10_2.12-{pyspark.__version__}.jar" in str(mismatch.value)
    assert "['spark-sql-kafka-0-10_2.12-3.4.0.jar']" in str(mismatch.value)
