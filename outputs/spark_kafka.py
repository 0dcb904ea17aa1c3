"""The Spark output's ``kafka`` sink: the ``kafka`` output's records
(:class:`dblog.outputs.kafka_records.RecordPlanner`: topic per table, key, format, tombstones,
table-level events on every partition, ``dblog.seq``/``dblog.pos``/``dblog.epoch``/``dblog.op``
headers) written by Spark's own Kafka sink (spark-sql-kafka).

At-least-once: Spark's Kafka sink has no transactions. A flush returns once Spark's write
finished (the sink's producer flushes and checks every send before its task ends); a failed
or repeated flush sends its records again, after those that did reach the broker, in the same
order. Every copy carries the same ``dblog.seq`` and ``dblog.pos`` headers and value, so a
consumer that keeps the last record per key in partition order (or compares positions) is
unaffected by the repeats.

Order: the records of one flush are coalesced into one DataFrame partition, so one task sends
them in stream order; keyed records go through Kafka's default partitioner (murmur2 of the
key, as the ``kafka`` output's ``murmur2_random``), table-level events to explicit partitions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dblog.core.model import ChangeEvent, TableId, TableInfo
from dblog.errors import ConfigError, DblogError, RetryableOutputError
from dblog.formats.base import format_by_name
from dblog.outputs.kafka_config import topic_name
from dblog.outputs.kafka_records import ANY_PARTITION, KafkaRecord, RecordPlanner

from .spark_config import SparkKafkaSink
from .spark_session import arrow_frame, jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
SCHEMA = pa.schema([pa.field("topic", pa.string()), pa.field("key", pa.binary()),
                    pa.field("value", pa.binary()), pa.field("partition", pa.int32()),
                    pa.field("headers", pa.list_(HEADER))])


def record_table(records: Sequence[KafkaRecord]) -> pa.Table:
    """The rows of Spark's Kafka sink (``partition`` null: the partitioner chooses)."""
    headers = [[{"key": k, "value": v.encode() if isinstance(v, str) else v}
                for k, v in r.headers] for r in records]
    return pa.table([pa.array([r.topic for r in records], pa.string()),
                     pa.array([r.key for r in records], pa.binary()),
                     pa.array([r.value for r in records], pa.binary()),
                     pa.array([None if r.partition == ANY_PARTITION else r.partition
                               for r in records], pa.int32()),
                     pa.array(headers, pa.list_(HEADER))], schema=SCHEMA)


class SparkKafkaWriter:
    """Sends events as the ``kafka`` output would, through Spark."""

    def __init__(self, spark: SparkSession, config: SparkKafkaSink,
                 lookup: Callable[[TableId], TableInfo | None], pipeline: str,
                 epoch: int) -> None:
        self.spark, self.config = spark, config
        try:
            fmt = format_by_name(config.format, config.format_options)
        except DblogError as exc:
            raise ConfigError(f"spark output: kafka sink: format: {exc.message}",
                              fix=exc.fix) from None
        values = config.topic_values(pipeline)
        txn = config.transaction_topic
        self.planner = RecordPlanner(fmt, config.topic, values,
                                     None if txn is None else topic_name(txn, **values),
                                     config.tombstones, self._partitions, lookup)
        self.planner.set_epoch(epoch)
        self._counts: dict[str, int] = {}

    def _partitions(self, topic: str) -> int:
        """A topic's partition count (for table-level events), asked once through the Kafka
        client Spark's connector brings."""
        count = self._counts.get(topic)
        if count is not None:
            return count
        view = jvm(self.spark)
        props = view.java.util.Properties()
        props.setProperty("bootstrap.servers", self.config.bootstrap_servers)
        for key, value in self.config.options.items():
            if key.startswith("kafka."):
                props.setProperty(key[len("kafka."):], value)
        bytes_in = view.org.apache.kafka.common.serialization.ByteArrayDeserializer
        consumer = view.org.apache.kafka.clients.consumer.KafkaConsumer(
            props, bytes_in(), bytes_in())
        try:
            found = consumer.partitionsFor(topic)
            count = 0 if found is None else int(found.size())
        finally:
            consumer.close()
        if not count:
            raise RetryableOutputError(f"Kafka topic {topic} has no partitions yet")
        self._counts[topic] = count
        return count

    def send(self, events: Sequence[ChangeEvent]) -> int:
        """Write ``events``' records; returns how many were sent."""
        records = [r for event in events for r in self.planner.plan(event)]
        if not records:
            return 0
        # one task sends them in order: Spark spreads a local relation over
        # defaultParallelism partitions, whose tasks would interleave one key's records
        frame = arrow_frame(self.spark, record_table(records)).coalesce(1)
        writer: Any = frame.write.format("kafka")
        writer = writer.option("kafka.bootstrap.servers", self.config.bootstrap_servers)
        for key, value in self.config.options.items():
            writer = writer.option(key, value)
        writer.save()
        return len(records)
