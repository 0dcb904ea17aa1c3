"""The harness's Kafka broker does what the exactly-once Kafka output relies on and librdkafka's
mock cluster does not (measured there: no fencing, aborted records visible to read_committed):
a second producer with the same ``transactional.id`` fences the first, and a ``read_committed``
consumer never sees an aborted transaction's records."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # re-export

pytestmark = pytest.mark.integration


def _topic(bootstrap: str) -> str:
    """A fresh one-partition topic, so the records of all transactions are in one order."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    futures = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)],
                                  operation_timeout=30)
    futures[name].result(timeout=30)
    return name


def _producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 60_000, "linger.ms": 0})
    producer.init_transactions(30)
    return producer


def _read_until(bootstrap: str, topic: str, isolation: str, last: bytes) -> list[bytes]:
    """Every value in the topic's one partition up to and including ``last`` (bounded by time).
    The partition is assigned, not subscribed: no consumer group, no rebalance to wait for."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "isolation.level": isolation, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while last not in values:
            assert time.monotonic() < deadline, f"{last!r} not read in 60 s; read {values}"
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                raise KafkaException(message.error())
            value = message.value()
            assert value is not None
            values.append(value)
    finally:
        consumer.close()
    return values


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(
        kafka_bootstrap: str) -> None:
    topic = _topic(kafka_bootstrap)
    txn_id = f"txn-{uuid.uuid4().hex[:10]}"
    old = _producer(kafka_bootstrap, txn_id)
    old.begin_transaction()
    old.produce(topic, value=b"zombie-1")
    old.produce(topic, value=b"zombie-2")
    assert old.flush(30) == 0  # the records reach the broker inside the open transaction

    new = _producer(kafka_bootstrap, txn_id)  # bumps the epoch, aborts the open transaction
    new.begin_transaction()
    new.produce(topic, value=b"leader-1")
    new.commit_transaction(30)

    with pytest.raises(KafkaException) as raised:
        old.commit_transaction(30)
    error = raised.value.args[0]
    assert error.code() == KafkaError._FENCED, error
    assert error.fatal(), error
    assert "fenced" in error.str().lower(), error

    assert _read_until(kafka_bootstrap, topic, "read_committed", b"leader-1") == [b"leader-1"]
    # the zombie's records were written to the log and are hidden only by the abort marker
    assert _read_until(kafka_bootstrap, topic, "read_uncommitted", b"leader-1") == [
        b"zombie-1", b"zombie-2", b"leader-1"]


def test_a_read_committed_consumer_does_not_see_aborted_records(kafka_bootstrap: str) -> None:
    topic = _topic(kafka_bootstrap)
    producer = _producer(kafka_bootstrap, f"txn-{uuid.uuid4().hex[:10]}")
    for values, commit in (([b"c1", b"c2"], True), ([b"a1", b"a2"], False), ([b"c3"], True)):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value=value)
        assert producer.flush(30) == 0
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    assert _read_until(kafka_bootstrap, topic, "read_committed", b"c3") == [b"c1", b"c2", b"c3"]
    assert _read_until(kafka_bootstrap, topic, "read_uncommitted", b"c3") == [
        b"c1", b"c2", b"a1", b"a2", b"c3"]
