"""Producing with backpressure and checking every delivery report.

Every record is produced with a delivery callback of its write batch (:class:`Batch`). A batch
is delivered when all its records are; the acknowledgement is the last seq of the longest run
of delivered batches from the oldest one (:meth:`Tracker.advance`), so a seq is acknowledged
only when its every record and every earlier one reached the broker. A failed report (after
librdkafka's own retries, up to ``message.timeout.ms``) stops the acknowledgement for good: the
error is raised at the next flush and the run restarts from the committed state, which sends
the record again in order. Nothing is skipped.

librdkafka's local queue is bounded (``queue.buffering.max.*``): when it is full ``produce``
raises BufferError and :meth:`Sender.produce` serves delivery reports until there is room, for
at most ``stall_timeout_s``, then raises a retryable error (the retried write resumes after the
last record produced). So memory stays bounded and a slow broker slows capture.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from dblog.core.model import TableId
from dblog.errors import DblogError, RetryableOutputError
from dblog.outputs.kafka_errors import classified, classify, is_too_large, too_large
from dblog.outputs.kafka_records import KafkaRecord

log = logging.getLogger("dblog.outputs.kafka")
_LOG_EVERY_S = 5.0


class Batch:
    """The records of one write batch in flight: how many are outstanding, the first failure."""

    __slots__ = ("error", "failed", "first", "last", "outstanding")

    def __init__(self, first: int) -> None:
        self.first, self.last, self.outstanding = first, first - 1, 0
        self.error: KafkaError | None = None
        self.failed: Message | None = None

    def done(self, error: KafkaError | None, message: Message) -> None:
        """The delivery callback of each of the batch's records (on the producing thread)."""
        self.outstanding -= 1
        if error is not None and self.error is None:
            self.error, self.failed = error, message


class Tracker:
    """The batches not yet acknowledged, oldest first."""

    def __init__(self, acked: int, table_of: dict[str, TableId]) -> None:
        self.acked = acked
        self.table_of = table_of
        self.batches: deque[Batch] = deque()

    def start(self, first_seq: int) -> Batch:
        batch = Batch(first_seq)
        self.batches.append(batch)
        return batch

    def outstanding(self) -> int:
        return sum(b.outstanding for b in self.batches)

    def advance(self) -> int:
        """Acknowledge the delivered batches from the oldest; raise the first failure."""
        batches = self.batches
        while batches and batches[0].outstanding == 0:
            batch = batches[0]
            if batch.error is not None:
                raise self.failure(batch)
            batches.popleft()
            if batch.last >= batch.first:
                self.acked = batch.last
        return self.acked

    def failure(self, batch: Batch) -> DblogError:
        error, message = batch.error, batch.failed
        assert error is not None and message is not None
        seqs = f"seq {batch.first}..{batch.last}"
        topic = message.topic() or "?"
        if is_too_large(error):
            size = len(message.value() or b"")
            return too_large(error, self.table_of.get(topic, topic), _bytes(message.key()),
                             batch.first, size)
        key = _bytes(message.key())
        shown = "no key" if key is None else key.decode("utf-8", "replace")[:200]
        return classify(error, f"delivery of a record to {topic} (key {shown}, {seqs}) "
                               "failed after the producer's retries")

    def clear(self) -> None:
        self.batches.clear()


def _bytes(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


class Sender:
    """Produces records on one producer, waiting for room when its queue is full."""

    def __init__(self, producer: Producer, table_of: dict[str, TableId],
                 stall_timeout_s: float) -> None:
        self.producer = producer
        self.table_of = table_of
        self.stall_timeout_s = stall_timeout_s

    def produce(self, record: KafkaRecord, callback: Callable[..., None]) -> None:
        """Produce ``record``, waiting for room in the queue; a refusal is classified."""
        produce = self.producer.produce
        try:
            produce(record.topic, record.value, record.key, record.partition,
                    on_delivery=callback, headers=record.headers)
        except BufferError:
            self._wait_for_room(record, callback)
        except KafkaException as exc:
            raise self._refused(exc, record) from exc

    def _wait_for_room(self, record: KafkaRecord, callback: Callable[..., None]) -> None:
        started = logged = time.monotonic()
        while True:
            with classified("serving the Kafka producer's delivery reports"):
                self.producer.poll(0.05)
            try:
                self.producer.produce(record.topic, record.value, record.key, record.partition,
                                      on_delivery=callback, headers=record.headers)
                return
            except BufferError:
                now = time.monotonic()
                if now - started > self.stall_timeout_s:
                    raise RetryableOutputError(
                        f"the Kafka producer's queue stayed full for {self.stall_timeout_s:.0f}"
                        f" s ({len(self.producer)} records waiting): the brokers are not "
                        "taking records") from None
                if now - logged > _LOG_EVERY_S:
                    logged = now
                    log.warning("Kafka producer queue full for %.0f s (%d records waiting "
                                "for the brokers): capture waits", now - started,
                                len(self.producer))

    def _refused(self, exc: KafkaException, record: KafkaRecord) -> DblogError:
        error: KafkaError = exc.args[0]
        if is_too_large(error):
            size = len(record.value or b"") + len(record.key or b"")
            return too_large(error, self.table_of.get(record.topic, record.topic), record.key,
                             record.seq, size)
        return classify(error, f"producing to {record.topic}")

    def wait(self, tracker: Tracker, timeout_s: float) -> int:
        """Serve delivery reports until every batch is delivered (or ``timeout_s``); return
        the acknowledgement, raising a failure or a retryable timeout."""
        deadline = time.monotonic() + timeout_s
        acked = tracker.advance()
        while tracker.batches:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RetryableOutputError(
                    f"{tracker.outstanding()} Kafka record(s) not delivered within "
                    f"{timeout_s:.0f} s (acknowledged up to seq {acked}); the producer "
                    "keeps retrying")
            with classified("waiting for Kafka delivery reports"):
                self.producer.flush(min(left, 1.0))
            acked = tracker.advance()
        return acked
