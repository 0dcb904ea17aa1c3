"""The Output contract (tests/contract/test_output_contract.py) run against the Kafka output on
the harness's broker, in both delivery modes; what a read_committed consumer reads back, in seq
order, is the output's content.

Imported from the contract suite: every test whose promise Kafka keeps. Left out: the tests
that reopen with a *lower* committed seq and expect what was written beyond it to vanish (a
file is cut back; records in Kafka cannot be unwritten). Kafka's answer to a restart is tested
in test_kafka_output.py instead: at-least-once repeats those records with the same seq and
position, exactly-once never made them visible unless committed, and skips what it committed
when the engine replays it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from dblog.outputs.kafka import KafkaOutput
from dblog.spi import Output
from tests.contract.test_output_contract import (
    test_events_round_trip,
    test_flush_returns_the_last_written_seq,
    test_flush_right_after_open_acknowledges_the_committed_seq,
    test_reopen_with_the_same_or_a_higher_committed_seq_keeps_everything,
    test_the_output_has_a_name,
)

from .test_kafka_output_support import read_all, stream_view, topics_with_prefix

pytestmark = pytest.mark.integration
__all__ = [
    "test_events_round_trip",
    "test_flush_returns_the_last_written_seq",
    "test_flush_right_after_open_acknowledges_the_committed_seq",
    "test_reopen_with_the_same_or_a_higher_committed_seq_keeps_everything",
    "test_the_output_has_a_name",
]


class KafkaHarness:
    """Each new output is a fresh instance of one pipeline's output, as after a restart."""

    def __init__(self, bootstrap: str, delivery: str) -> None:
        self.bootstrap, self.delivery = bootstrap, delivery
        self.prefix = f"ct{uuid.uuid4().hex[:10]}"
        self.name = f"kafka-{delivery}"
        self.current: KafkaOutput | None = None

    def new_output(self) -> Output:
        if self.current is not None:
            self.current.close()
        self.current = KafkaOutput({
            "bootstrap_servers": self.bootstrap, "prefix": self.prefix,
            "delivery": self.delivery, "transactional_id": f"txn-{self.prefix}",
            "transaction_topic": "{prefix}.transactions"})
        self.current.bind(self.prefix, 1)
        return self.current

    def contents(self) -> list[dict[str, Any]]:
        topics = topics_with_prefix(self.bootstrap, self.prefix)
        return stream_view(read_all(self.bootstrap, topics)) if topics else []


@pytest.fixture(params=["at-least-once", "exactly-once"])
def harness(request: pytest.FixtureRequest, kafka_bootstrap: str) -> Iterator[KafkaHarness]:
    made = KafkaHarness(kafka_bootstrap, request.param)
    yield made
    if made.current is not None:
        made.current.close()
