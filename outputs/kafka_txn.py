"""Exactly-once delivery: Kafka transactions and the checkpoint topic.

Each flush is one transaction holding the events written since the last one and a checkpoint
record on the pipeline's compacted checkpoint topic (key: the pipeline name; value: the epoch,
the last seq in Kafka and the pipeline state of the last commit point). A ``read_committed``
consumer sees the events and the checkpoint together or not at all, so after a crash the last
checkpoint says exactly which events Kafka holds, even when the state store's save after the
commit never happened.

The transactional producer's ``init_transactions`` bumps the producer epoch of the
``transactional.id``: a deposed leader's producer is fenced (its commit fails) and its open
transaction is aborted (its records never become visible to ``read_committed`` consumers).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported names
    AdminClient,
    ConfigResource,
    NewTopic,
)

from dblog.errors import DblogError, FatalOutputError, RetryableOutputError
from dblog.outputs.kafka_errors import classify, describe

log = logging.getLogger("dblog.outputs.kafka")
CHECKPOINT_TOPIC_CONFIG = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}


@dataclass(frozen=True)
class StoredCheckpoint:
    """What the last committed transaction of a pipeline recorded."""

    pipeline: str
    epoch: int
    seq: int
    """The last event seq the transaction held (at or past the state's seq)."""
    state: dict[str, object] | None
    """The pipeline state of the last commit point (None: no commit point yet)."""

    def encode(self) -> bytes:
        return orjson.dumps({"pipeline": self.pipeline, "epoch": self.epoch, "seq": self.seq,
                             "state": self.state})

    @classmethod
    def decode(cls, raw: bytes) -> StoredCheckpoint:
        data = orjson.loads(raw)
        return cls(str(data["pipeline"]), int(data["epoch"]), int(data["seq"]), data["state"])


def ensure_checkpoint_topic(settings: dict[str, Any], topic: str, timeout_s: float) -> None:
    """Create the compacted one-partition checkpoint topic when missing; refuse one that is
    not compacted (retention would delete the last checkpoint)."""
    admin = AdminClient(settings)
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=-1,
                                            config=CHECKPOINT_TOPIC_CONFIG)],
                                  operation_timeout=timeout_s, request_timeout=timeout_s)
    try:
        futures[topic].result(timeout=timeout_s)
        log.info("created the checkpoint topic %s (compacted)", topic)
    except TimeoutError as exc:
        raise RetryableOutputError(f"creating the checkpoint topic {topic}: no answer from "
                                   f"the brokers within {timeout_s:g} s") from exc
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise classify(error, f"creating the checkpoint topic {topic}") from exc
    _check_compacted(admin, topic, timeout_s)


def _check_compacted(admin: AdminClient, topic: str, timeout_s: float) -> None:
    policy = _cleanup_policy(admin, topic, timeout_s)
    if "compact" not in policy:
        raise FatalOutputError(
            f"the checkpoint topic {topic} has cleanup.policy={policy}: retention could "
            "delete the last checkpoint and a restart would repeat events",
            fix=f"kafka-configs --alter --entity-type topics --entity-name {topic} "
                "--add-config cleanup.policy=compact (or set checkpoint_topic to a new name)")


def _cleanup_policy(admin: AdminClient, topic: str, timeout_s: float) -> str:
    """The topic's cleanup.policy; a topic just created may be unknown to the broker that
    answers for a moment, so that answer is asked again until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    resource = ConfigResource("topic", topic)
    while True:
        try:
            configs = admin.describe_configs([resource], request_timeout=timeout_s)
            return str(configs[resource].result(timeout=timeout_s)["cleanup.policy"].value)
        except TimeoutError as exc:
            raise RetryableOutputError(f"reading the settings of {topic}: no answer from the "
                                       f"brokers within {timeout_s:g} s") from exc
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() not in _NOT_YET or time.monotonic() > deadline:
                raise classify(error, f"reading the settings of {topic}") from exc
        time.sleep(0.2)


def read_checkpoint(settings: dict[str, Any], topic: str, pipeline: str,
                    timeout_s: float) -> StoredCheckpoint | None:
    """The last committed checkpoint of ``pipeline`` (``read_committed``, to the end of the
    topic's one partition)."""
    consumer = Consumer({**settings, "group.id": f"dblog-checkpoint-{pipeline}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        last = _read_to_end(consumer, topic, pipeline.encode(), timeout_s)
    except KafkaException as exc:
        raise classify(exc.args[0], f"reading the checkpoint topic {topic}") from exc
    finally:
        consumer.close()
    if last is None:
        return None
    try:
        return StoredCheckpoint.decode(last)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise FatalOutputError(
            f"the last checkpoint of {pipeline} on {topic} is not dblog's ({exc}): "
            f"{last[:200]!r}", fix="set checkpoint_topic to a topic only dblog writes (a new "
            "one starts from the state store)") from exc


def _read_to_end(consumer: Consumer, topic: str, key: bytes, timeout_s: float) -> bytes | None:
    """The last value under ``key`` up to the end of the partition. With read_committed the
    end is the last stable offset: it reaches the high watermark once no transaction is open
    (ours was completed by init_transactions; the topic is this pipeline's own)."""
    deadline = time.monotonic() + timeout_s
    high = _high_watermark(consumer, topic, timeout_s)
    last: bytes | None = None
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        error = message.error()
        if error is not None and error.code() == KafkaError._PARTITION_EOF:
            if (message.offset() or 0) >= high:
                return last
            continue
        if error is not None:
            raise KafkaException(error)
        if message.key() == key:
            last = message.value()
    raise RetryableOutputError(f"reading the checkpoint topic {topic} to offset {high} did "
                               f"not finish in {timeout_s:.0f} s (a transaction still open?)")


def _high_watermark(consumer: Consumer, topic: str, timeout_s: float) -> int:
    """The end of the partition; asked again while a just-created topic is not known yet."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            offsets = consumer.get_watermark_offsets(TopicPartition(topic, 0),
                                                     timeout=timeout_s)
        except KafkaException as exc:
            if exc.args[0].code() not in _NOT_YET or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
            continue
        if offsets is None:
            raise RetryableOutputError(f"no answer about the checkpoint topic {topic} within "
                                       f"{timeout_s:.0f} s")
        return int(offsets[1])


_NOT_YET = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.LEADER_NOT_AVAILABLE,
                      KafkaError.NOT_LEADER_FOR_PARTITION})


def transactional_call(what: str, call: Any, *args: Any) -> None:
    """Run a transactional API call; its error classified (abortable errors are retryable:
    the caller aborts and replays)."""
    try:
        call(*args)
    except KafkaException as exc:
        raise classify(exc.args[0], what) from exc


def init_transactions(producer: Producer, txn_id: str, timeout_s: float) -> None:
    """Fence every earlier producer of ``txn_id`` and abort its open transaction; retried
    while the coordinator is busy (e.g. still aborting), up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            producer.init_transactions(max(1.0, deadline - time.monotonic()))
            return
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if not error.retriable() or time.monotonic() >= deadline:
                raise classify(error, f"init_transactions of {txn_id}") from exc
            log.warning("init_transactions of %s: %s; retrying", txn_id, describe(error))
            time.sleep(0.5)


def commit(producer: Producer, timeout_s: float) -> DblogError | None:
    """Commit the open transaction. None on success; else the error to raise, with
    ``aborted`` set on it when the transaction had to be aborted (its records are gone and
    must be replayed) rather than merely retried."""
    try:
        producer.commit_transaction(timeout_s)
        return None
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        if error.txn_requires_abort():
            abort(producer, timeout_s)
            return Aborted(f"the Kafka transaction failed and was aborted: {describe(error)};"
                           " the run restarts from the last committed checkpoint")
        if error.retriable():
            return RetryableOutputError(f"committing the Kafka transaction: {describe(error)}"
                                        " (the commit is retried)")
        return classify(error, "committing the Kafka transaction")


class Aborted(RetryableOutputError):
    """The open transaction was aborted: its records must be sent again, which only a restart
    from the committed state does (the output refuses further calls until reopened)."""


def abort(producer: Producer, timeout_s: float) -> None:
    """Abort the open transaction, best effort (a fenced producer cannot, and need not)."""
    try:
        producer.abort_transaction(timeout_s)
    except KafkaException as exc:
        log.warning("aborting the Kafka transaction failed: %s", describe(exc.args[0]))
