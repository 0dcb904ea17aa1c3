"""The Kafka output: a topic per table, keyed by primary key, delivery reports checked.

``delivery: at-least-once`` (default): an idempotent producer; ``flush`` acknowledges the
highest seq whose every record, and every earlier one, was delivered
(:mod:`dblog.outputs.kafka_delivery`). After a crash the engine replays from the committed
state, so records after it may arrive twice, each copy with the same document and
``dblog.pos`` header, in the same per-key order (the seq of log events after a dump chunk that
was read again can differ between copies).

``delivery: exactly-once``: one transactional producer per pipeline; each flush commits one
transaction with the events and a checkpoint record (:mod:`dblog.outputs.kafka_txn`). On open,
``init_transactions`` fences a deposed leader and aborts its open transaction, and the last
checkpoint is read back (``read_committed``): the engine resumes from it when it is ahead of
the state store, and events Kafka already holds are skipped when replayed. A
``read_committed`` consumer sees every event once.

Records, keys, tombstones and headers: :mod:`dblog.outputs.kafka_records`; errors:
:mod:`dblog.outputs.kafka_errors`; the user's view: docs/outputs/kafka.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from confluent_kafka import KafkaException, Producer

from dblog.core.model import ChangeEvent
from dblog.errors import (
    ConfigError,
    DblogError,
    FatalOutputError,
    LeadershipLost,
    RetryableOutputError,
)
from dblog.formats.base import Format, TableLookup, format_by_name, no_tables
from dblog.outputs.kafka_client import (
    ProducerErrors,
    check_brokers,
    librdkafka_log,
    new_producer,
    partition_count,
    probe,
)
from dblog.outputs.kafka_config import KafkaConfig, topic_name
from dblog.outputs.kafka_delivery import Sender, Tracker
from dblog.outputs.kafka_errors import ProducerFenced, classified, classify
from dblog.outputs.kafka_records import KafkaRecord, RecordPlanner
from dblog.outputs.kafka_txn import (
    Aborted,
    StoredCheckpoint,
    abort,
    commit,
    ensure_checkpoint_topic,
    init_transactions,
    read_checkpoint,
    transactional_call,
)
from dblog.spi import Checkpoint, Finding

log = logging.getLogger("dblog.outputs.kafka")
_SLOW_COMMIT_S = 2.0


class KafkaOutput:
    """A :class:`dblog.spi.Output` (also Fenced-, Discarding-, Checkpointing-, Sole-Output and
    PipelineBound) writing to Kafka with confluent-kafka."""

    config_model = KafkaConfig

    def __init__(self, config: KafkaConfig | dict[str, Any], *, name: str | None = None,
                 tables: TableLookup = no_tables) -> None:
        self.config = config if isinstance(config, KafkaConfig) else KafkaConfig(**config)
        try:
            self.format: Format = format_by_name(self.config.format, self.config.format_options)
        except DblogError as exc:
            raise ConfigError(f"kafka output: format: {exc.message}", fix=exc.fix) from None
        self.name = name or f"kafka:{self.config.bootstrap_servers}"
        self.tables = tables
        self.pipeline, self.epoch = "dblog", 0
        self._fence: Callable[[], bool] | None = None
        self._producer: Producer | None = None
        self._ever_connected = False
        self._partitions: dict[str, int] = {}
        self._planner = self._new_planner()
        self._tracker = Tracker(0, self._planner.table_of)
        self._sent = self._acked = 0
        self._poison: DblogError | None = None
        self._errors = ProducerErrors()
        self._stored: StoredCheckpoint | None = None
        self._pending: StoredCheckpoint | None = None
        self._in_txn = self._commit_pending = False
        self._txn_started: float | None = None
        self._partial: tuple[int, int] | None = None  # (seq, its records already produced)

    @classmethod
    def from_config(cls, raw: dict[str, Any]) -> KafkaOutput:
        return cls(KafkaConfig(**raw))

    def _new_planner(self) -> RecordPlanner:
        values = self.config.topic_values(self.pipeline)
        txn_topic = self.config.transaction_topic
        return RecordPlanner(self.format, self.config.topic, values,
                             None if txn_topic is None else topic_name(txn_topic, **values),
                             self.config.tombstones, self._partition_count, self.tables)

    # -- abilities ----------------------------------------------------------------------------

    def set_tables(self, lookup: TableLookup) -> None:
        """The source's table metadata, for formats that write it (:class:`TableAwareOutput`);
        given before :meth:`open`."""
        self.tables = lookup
        self._planner = self._new_planner()
        self._planner.set_epoch(self.epoch)
        self._tracker.table_of = self._planner.table_of

    def bind(self, pipeline: str, epoch: int) -> None:
        """The pipeline (topic prefix, transactional id, checkpoint key) and the leader epoch
        (the ``dblog.epoch`` header; a checkpoint of a newer epoch refuses this run)."""
        self.pipeline, self.epoch = pipeline, epoch
        self._planner = self._new_planner()
        self._planner.set_epoch(epoch)
        self._tracker.table_of = self._planner.table_of

    def needs_to_be_sole(self) -> bool:
        """Exactly-once skips what Kafka holds by seq: the pipeline's only output
        (:class:`dblog.spi.SoleOutput`)."""
        return self.config.exactly_once

    def set_fence(self, may_write: Callable[[], bool]) -> None:
        """Asked before each batch is produced and before each commit (FencedOutput)."""
        self._fence = may_write

    @property
    def transactional_id(self) -> str:
        return self.config.transactional_id or f"dblog-{self.pipeline}"

    @property
    def checkpoint_topic(self) -> str:
        return topic_name(self.config.checkpoint_topic,
                          **self.config.topic_values(self.pipeline))

    # -- open ---------------------------------------------------------------------------------

    def open(self, committed_seq: int) -> None:
        started = time.monotonic()
        self._teardown()
        self._poison, self._stored, self._partial = None, None, None
        self._in_txn = self._commit_pending = False
        self._txn_started = None
        self._partitions.clear()
        self._errors = ProducerErrors()
        producer = self._producer = new_producer(self.config, self.pipeline, self._errors,
                                                 self.name)
        probe(producer, self.config, self._ever_connected)
        self._ever_connected = True
        start = committed_seq
        if self.config.exactly_once:
            start = max(start, self._open_transactions(producer))
        self._sent = self._acked = start
        self._tracker = Tracker(start, self._planner.table_of)
        log.info("Kafka output %s open (%s) in %.1f s, from seq %d", self.name,
                 self.config.delivery, time.monotonic() - started, start)

    def _open_transactions(self, producer: Producer) -> int:
        """Fence earlier producers, read the checkpoint; the seq Kafka holds up to."""
        settings = self.config.client_settings(librdkafka_log)
        timeout = self.config.connect_timeout_s
        ensure_checkpoint_topic(settings, self.checkpoint_topic, timeout)
        init_transactions(producer, self.transactional_id, timeout)
        stored = read_checkpoint(settings, self.checkpoint_topic, self.pipeline, timeout)
        if stored is not None and stored.epoch > self.epoch:
            raise LeadershipLost(
                f"the Kafka checkpoint of {self.pipeline} was committed by leader epoch "
                f"{stored.epoch}, newer than this instance's {self.epoch}",
                fix="another instance leads; if this pipeline moved from ZooKeeper to a file "
                    "state, use a new checkpoint_topic")
        self._stored = stored
        if stored is not None:
            log.info("Kafka checkpoint of %s: events up to seq %d committed (epoch %d)",
                     self.pipeline, stored.seq, stored.epoch)
        return 0 if stored is None else stored.seq

    def committed_checkpoint(self) -> Checkpoint | None:
        """The pipeline state committed with the last transaction (exactly-once only)."""
        stored = self._stored
        if stored is None or stored.state is None:
            return None
        return Checkpoint(stored.pipeline, stored.epoch, stored.state)

    # -- write --------------------------------------------------------------------------------

    def write(self, events: Sequence[ChangeEvent]) -> None:
        with self._fencing_explained():
            producer = self._require()
            fresh = [e for e in events if e.seq > self._sent]  # replays Kafka holds; retries
            if not fresh:
                return
            records = self._planner.plan_batch(fresh)
            self._check_fence(f"{len(fresh)} event(s) not produced")
            self._begin(producer)
            self._produce(producer, records, fresh[0].seq, fresh[-1].seq)

    def _begin(self, producer: Producer) -> None:
        if self.config.exactly_once and not self._in_txn:
            transactional_call("beginning a Kafka transaction", producer.begin_transaction)
            self._in_txn, self._txn_started = True, time.monotonic()

    def _produce(self, producer: Producer, records: list[KafkaRecord], first: int,
                 last: int) -> None:
        """Produce in order; ``_sent`` is the last event whose every record was produced, and
        ``_partial`` how many records of the next one were: a retried write resumes after
        them (an event can be several records: a delete and its tombstone, a key change)."""
        batch = self._tracker.start(first)
        callback, produce, sent = batch.done, producer.produce, self._sent
        resume_seq, skip = self._partial or (-1, 0)
        self._partial, done = None, 0
        try:
            for record in records:
                if record.seq != sent:
                    self._sent = batch.last = sent  # the previous event is complete
                    sent, done = record.seq, 0
                if sent == resume_seq and done < skip:
                    done += 1  # produced by the failed attempt
                    continue
                try:
                    produce(record.topic, record.value, record.key, record.partition,
                            on_delivery=callback, headers=record.headers)
                except (BufferError, KafkaException):
                    self._sender(producer).produce(record, callback)
                batch.outstanding += 1
                done += 1
            self._sent = batch.last = last
        except BaseException:
            self._partial = (sent, done)
            raise
        finally:
            with classified("serving the Kafka producer's delivery reports"):
                producer.poll(0)

    def _sender(self, producer: Producer) -> Sender:
        return Sender(producer, self._planner.table_of, self.config.flush_timeout_s)

    @contextmanager
    def _fencing_explained(self) -> Iterator[None]:
        """A fenced producer whose transaction was open longer than the broker allows was
        fenced by the coordinator's abort of that transaction, not by a newer leader (the
        coordinator aborts only after the timeout, counted from a moment after this output's
        clock started): the run restarts with a new producer (retryable). A newer leader's
        fencing stays :class:`LeadershipLost`; a restart asks the election before it opens."""
        try:
            yield
        except ProducerFenced as exc:
            started, limit = self._txn_started, self.config.transaction_timeout
            age = 0.0 if started is None else time.monotonic() - started
            if age < limit:
                raise
            self._poison = RetryableOutputError(
                f"the Kafka transaction was open {age:.0f} s, longer than the broker allows "
                f"({limit:g} s): the broker aborted it and fenced this producer; the run "
                "restarts from the committed state with a new producer")
            raise self._poison from exc

    def _check_fence(self, what: str) -> None:
        if self._fence is not None and not self._fence():
            raise LeadershipLost(f"leadership lost: {what} to Kafka")

    def _require(self) -> Producer:
        if self._poison is not None:
            raise self._poison
        if self._errors.fatal is not None:
            self._poison = classify(self._errors.fatal, "the Kafka producer failed")
            raise self._poison
        if self._producer is None:
            raise FatalOutputError(f"output {self.name} is not open")
        if self._commit_pending:
            raise RetryableOutputError("a Kafka commit is still pending")
        return self._producer

    # -- flush --------------------------------------------------------------------------------

    def flush(self) -> int:
        with self._fencing_explained():
            if self.config.exactly_once:
                return self._commit(None)
            return self._flush_delivered()

    def _flush_delivered(self) -> int:
        producer = self._require()
        sender = self._sender(producer)
        try:
            self._acked = sender.wait(self._tracker, self.config.flush_timeout_s)
        except DblogError as exc:
            if self._tracker.batches and self._tracker.batches[0].error is not None:
                self._poison = exc  # a failed delivery: only a replay sends it again
            raise
        return self._acked

    def flush_checkpoint(self, checkpoint: Checkpoint) -> int:
        """Commit everything written with ``checkpoint`` (exactly-once); at-least-once has no
        checkpoint and flushes."""
        if not self.config.exactly_once:
            return self.flush()
        with self._fencing_explained():
            return self._commit(checkpoint)

    def _commit(self, checkpoint: Checkpoint | None) -> int:
        if not self._commit_pending:
            producer = self._require()
            stored = self._stored
            state = checkpoint.state if checkpoint is not None else \
                (None if stored is None else stored.state)
            if not self._in_txn and (checkpoint is None or
                                     (stored is not None and stored.state == state)):
                return self._acked
            self._check_fence("a transaction not committed")
            self._begin(producer)
            self._pending = StoredCheckpoint(self.pipeline, self.epoch, self._sent, state)
            batch = self._tracker.start(self._sent + 1)  # no event: acknowledges nothing
            record = KafkaRecord(self.checkpoint_topic, self.pipeline.encode(),
                                 self._pending.encode(), 0, [], self._sent)
            self._sender(producer).produce(record, batch.done)
            batch.outstanding += 1
            self._commit_pending = True
        return self._finish_commit()

    def _finish_commit(self) -> int:
        """Wait for the delivery reports (a refused record is named and the transaction
        aborted), then commit; a retryable failure leaves the commit pending for a retry."""
        producer, pending = self._producer, self._pending
        assert producer is not None and pending is not None
        sender = self._sender(producer)
        started = time.monotonic()
        try:
            sender.wait(self._tracker, self.config.flush_timeout_s)
            error = commit(producer, self.config.flush_timeout_s)
            if time.monotonic() - started > _SLOW_COMMIT_S:
                log.warning("a Kafka transaction commit took %.1f s",
                            time.monotonic() - started)
        except DblogError as exc:
            if not self._tracker.batches or self._tracker.batches[0].error is None:
                raise  # not delivered in time: the commit stays pending and is retried
            abort(producer, self.config.flush_timeout_s)
            error = exc
            self._poison = exc
        if error is not None:
            if not error.retryable or isinstance(error, Aborted) or self._poison is error:
                self._poison, self._commit_pending, self._in_txn = error, False, False
            raise error
        self._commit_pending = self._in_txn = False
        self._txn_started = None
        self._stored, self._acked = pending, pending.seq
        self._tracker = Tracker(self._acked, self._planner.table_of)
        return self._acked

    def _partition_count(self, topic: str) -> int:
        count = self._partitions.get(topic)
        if count is None:
            assert self._producer is not None
            count = self._partitions[topic] = partition_count(self._producer, topic,
                                                              self.config.connect_timeout_s)
        return count

    # -- stop ---------------------------------------------------------------------------------

    def discard(self) -> None:
        """A deposed leader: abort the open transaction / drop queued records, write nothing
        more (DiscardingOutput)."""
        producer, self._producer = self._producer, None
        if producer is None:
            return
        if self.config.exactly_once:
            if self._in_txn or self._commit_pending:
                abort(producer, 5.0)
        else:
            producer.purge(in_queue=True, in_flight=True, blocking=False)
            producer.poll(0)

    def close(self) -> None:
        """Stop: an open transaction is aborted (nothing in it was acknowledged); at-least-once
        delivers what is queued (fewer repeats after a restart)."""
        producer, self._producer = self._producer, None
        if producer is None:
            return
        if self.config.exactly_once:
            if self._in_txn or self._commit_pending:
                abort(producer, self.config.flush_timeout_s)
        else:
            producer.flush(self.config.flush_timeout_s)

    def _teardown(self) -> None:
        if self._producer is not None:
            self.discard()

    def check(self) -> list[Finding]:
        """``dblog check``: the brokers answer, and what the format needs is configured."""
        return check_brokers(self.config, self.pipeline, self.name)
