"""Kafka unreachable at start: dblog's one error, not hundreds of librdkafka log lines.

librdkafka logs a broker connection failure (facility FAIL) at ERROR on every reconnect
attempt; ``dblog run`` against a wrong port printed 579 such lines before its one clear error.
The error callback (ProducerErrors) already reports the outage, rate-limited."""

from __future__ import annotations

import logging

import pytest

from dblog.errors import FatalOutputError
from dblog.outputs.kafka_client import ProducerErrors, new_producer, probe
from dblog.outputs.kafka_config import KafkaConfig


def test_unreachable_brokers_give_one_error_and_few_log_lines(
        caplog: pytest.LogCaptureFixture) -> None:
    config = KafkaConfig(bootstrap_servers="127.0.0.1:1", topic="t", connect_timeout_s=2)
    producer = new_producer(config, "p", ProducerErrors(), "kafka:t")
    caplog.set_level(logging.DEBUG, logger="dblog.outputs.kafka")
    with pytest.raises(FatalOutputError) as caught:
        probe(producer, config, ever_connected=False)
    producer.poll(0.5)  # serves the log lines librdkafka queued meanwhile
    producer.purge()
    assert "bootstrap_servers" in (caught.value.fix or "")
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(loud) <= 3, [r.getMessage() for r in loud]
    quiet = [r for r in caplog.records if r.levelno == logging.DEBUG and "FAIL" in r.getMessage()]
    assert quiet, "librdkafka's own lines are still there at DEBUG"
