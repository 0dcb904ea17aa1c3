"""The Kafka output under producer faults on the real broker: a producer fenced with records
in flight, a transaction that outlived its timeout (the broker aborts it and fences the
producer), a queue full in the middle of an event, and a queue full at the checkpoint record.
Each fault surfaces as dblog's error (never a raw librdkafka exception), and what a
``read_committed`` consumer sees holds every event exactly once."""

from __future__ import annotations

import time
from typing import Any, cast

import pytest
from confluent_kafka import Producer

from dblog.errors import DblogError, LeadershipLost, RetryableOutputError
from dblog.outputs.kafka import KafkaOutput
from tests.contract.test_output_contract import make_events

from .test_kafka_output import _checkpoint, _output, _prefix
from .test_kafka_output_support import read_all, repeated, stream_view, topics_with_prefix

pytestmark = pytest.mark.integration


class QueueFullAt:
    """The output's producer, whose ``produce`` calls numbered in ``calls`` find the local
    queue full (as when the brokers do not take records)."""

    def __init__(self, real: Any, calls: set[int]) -> None:
        self.real, self.calls, self.count = real, calls, 0

    def produce(self, *args: Any, **kwargs: Any) -> None:
        number, self.count = self.count, self.count + 1
        if number in self.calls:
            raise BufferError("Local: Queue full")
        self.real.produce(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def __len__(self) -> int:
        return len(self.real)


def _seqs(bootstrap: str, prefix: str) -> list[int]:
    docs = stream_view(read_all(bootstrap, topics_with_prefix(bootstrap, prefix)))
    return [d["seq"] for d in docs]


def _exactly_once_holding_three(bootstrap: str, prefix: str, **config: Any) -> KafkaOutput:
    """An exactly-once output, open, that committed events 1-3 with their checkpoint."""
    output = _output(bootstrap, prefix, delivery="exactly-once", **config)
    output.open(0)
    output.write(make_events(1, 3))
    assert output.flush_checkpoint(_checkpoint(prefix, 3)) == 3
    return output


def test_a_producer_fenced_with_records_in_flight_raises_leadership_lost(
        kafka_bootstrap: str) -> None:
    prefix = _prefix()
    old = _exactly_once_holding_three(kafka_bootstrap, prefix, flush_timeout_s=10)
    old.write(make_events(4, 10))
    new = _output(kafka_bootstrap, prefix, delivery="exactly-once")
    new.bind(prefix, 2)
    new.open(3)
    time.sleep(1)
    with pytest.raises(LeadershipLost, match="fenced"):
        old.write(make_events(11, 20))
        old.flush_checkpoint(_checkpoint(prefix, 20))
    new.close()
    old.discard()
    assert _seqs(kafka_bootstrap, prefix) == [1, 2, 3]


def test_a_transaction_past_its_timeout_is_retryable_and_a_reopen_loses_nothing(
        kafka_bootstrap: str) -> None:
    prefix = _prefix()
    output = _exactly_once_holding_three(kafka_bootstrap, prefix, transaction_timeout_s=2)
    output.write(make_events(4, 6))
    time.sleep(5)  # the broker aborts the transaction (timeout 2 s, checked every second)
    with pytest.raises(RetryableOutputError, match="longer than the broker allows"):
        output.write(make_events(7, 8))
        output.flush_checkpoint(_checkpoint(prefix, 8))
    with pytest.raises(RetryableOutputError):  # until the run restarts, nothing more
        output.flush_checkpoint(_checkpoint(prefix, 8))
    output.open(3)  # what the engine's restart from the committed state does
    output.write(make_events(1, 8))
    assert output.flush_checkpoint(_checkpoint(prefix, 8)) == 8
    output.close()
    assert _seqs(kafka_bootstrap, prefix) == list(range(1, 9))


def test_a_write_retried_after_a_queue_full_inside_an_event_repeats_no_record(
        kafka_bootstrap: str) -> None:
    prefix = _prefix()
    output = _output(kafka_bootstrap, prefix, delivery="exactly-once", flush_timeout_s=1)
    output.open(0)
    events = make_events(1, 3)
    records = output._planner.plan_batch(events)
    multi = [s for s in {r.seq for r in records} if sum(r.seq == s for r in records) > 1]
    assert multi, "no event of several records (a delete and its tombstone)"
    last_of_event = max(i for i, r in enumerate(records) if r.seq == multi[0])
    real = output._producer
    output._producer = cast(Producer, QueueFullAt(real, set(range(last_of_event,
                                                                    last_of_event + 10_000))))
    with pytest.raises(RetryableOutputError, match="queue stayed full"):
        output.write(events)
    output._producer = real
    output.write(events)  # the sink's retry of the same batch
    assert output.flush_checkpoint(_checkpoint(prefix, 3)) == 3
    output.close()
    messages = read_all(kafka_bootstrap, topics_with_prefix(kafka_bootstrap, prefix))
    assert not repeated(messages), repeated(messages)
    assert len(messages) == len(records)


def test_a_full_queue_at_the_checkpoint_record_is_dblogs_error(kafka_bootstrap: str) -> None:
    prefix = _prefix()
    output = _output(kafka_bootstrap, prefix, delivery="exactly-once", flush_timeout_s=1)
    output.open(0)
    output.write(make_events(1, 3))
    real = output._producer
    output._producer = cast(Producer, QueueFullAt(real, set(range(10_000))))
    with pytest.raises(DblogError) as raised:
        output.flush_checkpoint(_checkpoint(prefix, 3))
    assert raised.value.retryable
    output._producer = real
    assert output.flush_checkpoint(_checkpoint(prefix, 3)) == 3  # the pending commit, retried
    output.close()
    assert _seqs(kafka_bootstrap, prefix) == [1, 2, 3]

