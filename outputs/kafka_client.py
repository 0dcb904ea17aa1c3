"""The producer's life around the output: creating it (settings refused by librdkafka are a
configuration error), the bounded metadata request at open, partition counts, and librdkafka's
global error callback.

Why a probe at open: librdkafka connects lazily and retries forever, so an unreachable cluster
would show as records that are never delivered. One metadata request with a deadline turns it
into one clear error at start (fatal: the configuration or the network is wrong), or, after
the output once connected, a retryable one (an outage: the run restarts with backoff).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from dblog.errors import ConfigError, FatalOutputError, RetryableOutputError
from dblog.outputs.kafka_config import KafkaConfig
from dblog.outputs.kafka_errors import classify, describe
from dblog.spi import Finding

log = logging.getLogger("dblog.outputs.kafka")
_ERROR_LOG_EVERY_S = 5.0
_LIBRDKAFKA_LOUD_EVERY_S = 60.0


class LibrdkafkaLog:
    """The ``logger`` librdkafka's own lines go to (``dblog.outputs.kafka.librdkafka``).

    librdkafka logs a broker connection failure (facility ``FAIL``) at ERROR on every reconnect
    attempt: hundreds of lines while brokers are unreachable, before dblog's one error. Lines
    at WARNING or above keep their level once a minute per facility; the others go to DEBUG.
    :class:`ProducerErrors` reports the outage itself (rate-limited) and the probe at open
    gives the one error with the fix."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self._loud: dict[str, float] = {}

    def log(self, level: int, msg: str, *args: Any) -> None:
        """confluent-kafka calls ``log(level, "%s [%s] %s", facility, client, text)``."""
        if level >= logging.WARNING:
            facility = str(args[0]) if args else ""
            now = time.monotonic()
            if now - self._loud.get(facility, -1e9) < _LIBRDKAFKA_LOUD_EVERY_S:
                level = logging.DEBUG
            else:
                self._loud[facility] = now
        self.logger.log(level, msg, *args)


librdkafka_log = LibrdkafkaLog(logging.getLogger("dblog.outputs.kafka.librdkafka"))


class ProducerErrors:
    """librdkafka's global error callback: a fatal error is kept (the output raises it at its
    next call); others (brokers down, reconnecting) are logged, at most every few seconds per
    kind, as the producer keeps retrying."""

    def __init__(self) -> None:
        self.fatal: KafkaError | None = None
        self._logged: dict[int, float] = {}

    def __call__(self, error: KafkaError) -> None:
        if error.fatal():
            self.fatal = error
            log.error("Kafka producer fatal error: %s", describe(error))
            return
        now = time.monotonic()
        if now - self._logged.get(error.code(), -1e9) >= _ERROR_LOG_EVERY_S:
            self._logged[error.code()] = now
            log.warning("Kafka: %s (the producer keeps retrying)", describe(error))


def new_producer(config: KafkaConfig, pipeline: str, errors: ProducerErrors,
                 name: str) -> Producer:
    settings = config.producer_settings(pipeline, errors, librdkafka_log)
    try:
        return Producer(settings)
    except KafkaException as exc:
        raise ConfigError(f"kafka output {name}: librdkafka refused the producer settings: "
                          f"{describe(exc.args[0])}",
                          fix="check the output's producer settings (librdkafka's "
                              "CONFIGURATION.md names every property)") from None


def probe(producer: Producer, config: KafkaConfig, ever_connected: bool) -> None:
    """One bounded metadata request; fatal unless the output connected before."""
    timeout = config.connect_timeout_s
    try:
        producer.list_topics(timeout=timeout)
    except KafkaException as exc:
        message = (f"Kafka brokers {config.bootstrap_servers} unreachable: no answer to a "
                   f"metadata request within {timeout:.0f} s ({describe(exc.args[0])})")
        if ever_connected:  # an outage after a good start: retried with backoff
            raise RetryableOutputError(message) from None
        raise FatalOutputError(message, fix="check bootstrap_servers and that the brokers run "
                               "and are reachable from this host (raise connect_timeout_s "
                               "for a slow start)") from None


def partition_count(producer: Producer, topic: str, timeout_s: float) -> int:
    """Partitions of ``topic``; asking creates it where the broker auto-creates topics, so
    a topic without partitions yet is asked again until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            meta = producer.list_topics(topic, timeout=timeout_s)
        except KafkaException as exc:
            raise classify(exc.args[0], f"metadata of {topic}") from exc
        info: Any = meta.topics.get(topic)
        if info is not None and info.error is None and info.partitions:
            return len(info.partitions)
        if time.monotonic() > deadline:
            error = None if info is None else info.error
            raise RetryableOutputError(f"topic {topic} has no partitions yet"
                                       f"{'' if error is None else ': ' + describe(error)}")
        time.sleep(0.2)


def check_brokers(config: KafkaConfig, pipeline: str, name: str) -> list[Finding]:
    """``dblog check`` of a Kafka output: its brokers answer a metadata request."""
    producer = new_producer(config, pipeline, ProducerErrors(), name)
    try:
        producer.list_topics(timeout=config.connect_timeout_s)
    except KafkaException as exc:
        return [Finding("error", f"{name}: Kafka brokers unreachable: {describe(exc.args[0])}",
                        "check bootstrap_servers")]
    finally:
        producer.purge()
    return [Finding("ok", f"{name}: brokers {config.bootstrap_servers} answer "
                    f"({config.delivery}, format {config.format})")]
