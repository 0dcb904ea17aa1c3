"""The Kafka output's configuration (``type: kafka`` in ``outputs``) and the librdkafka
settings derived from it.

Why a model of our own over raw librdkafka properties: the guarantees of the output (per-key
order, no skipped record, bounded memory, Java-compatible partitioning) rest on a few producer
settings, so those are set by the output and an override that would break them is refused with
the field and the fix named, at start rather than as a surprise at the first failure.
"""

from __future__ import annotations

import re
import string
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

TOPIC_FIELDS = frozenset({"prefix", "pipeline", "schema", "table"})
_TOPIC_CHARS = re.compile(r"[^A-Za-z0-9._-]")

_REFUSED = {
    "enable.idempotence": "the output always uses an idempotent producer (per-key order "
                          "across retries); remove producer.enable.idempotence",
    "transactional.id": "set the output's transactional_id field instead (exactly-once only)",
    "acks": "an idempotent producer needs acks=all; remove producer.acks",
    "bootstrap.servers": "set bootstrap_servers instead",
    "on_delivery": "the output checks every delivery itself; remove producer.on_delivery",
    "error_cb": "the output handles producer errors itself; remove producer.error_cb",
}
"""Producer overrides that would break a guarantee, with the fix."""
_KEYED_PARTITIONERS = frozenset({"murmur2_random", "murmur2"})
_SHARED_PREFIXES = ("security.", "sasl.", "ssl.", "ssl_", "enable.ssl.", "client.dns",
                    "socket.", "oauth", "broker.address.", "enable.sasl.")
"""The producer settings its admin client and consumer (checkpoint topic) get too: how to
reach and authenticate to the brokers."""

PRODUCER_DEFAULTS: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "max.in.flight.requests.per.connection": 5,
    "partitioner": "murmur2_random",
    "linger.ms": 5,
    "queue.buffering.max.messages": 100_000,
    "queue.buffering.max.kbytes": 65_536,
    "compression.type": "none",
}
"""What the output sets unless ``producer`` overrides it: an idempotent producer (no
duplicates or reordering from librdkafka's own retries, at most 5 requests in flight per
connection), Java's default partitioner for keyed records (``murmur2_random``: murmur2 of the
key bytes like Java clients, records without a key spread at random), and a bounded local queue
(100,000 records or 64 MiB, whichever is reached first): when it is full ``produce`` waits for
the broker, so a slow broker slows capture instead of growing memory."""


def check_topic_template(template: str, field: str,
                         allowed: frozenset[str] = TOPIC_FIELDS) -> str:
    """``template`` uses only the ``allowed`` placeholders; raises ValueError naming them."""
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name}
    except ValueError as exc:
        raise ValueError(f"{field} {template!r} is not a valid template ({exc}); write "
                         "placeholders as {{schema}}") from None
    unknown = names - allowed
    if unknown:
        raise ValueError(f"{field} {template!r} uses placeholder(s) {sorted(unknown)} it "
                         f"cannot fill; use {sorted(allowed)}")
    return template


def topic_name(template: str, **values: str) -> str:
    """The topic for ``values``: characters Kafka does not allow in topic names become ``_``
    (as Debezium does), so two tables whose names differ only there share a topic."""
    return _TOPIC_CHARS.sub("_", template.format(**values))[:249]


class KafkaConfig(BaseModel):
    """``type: kafka`` output. ``topic`` and ``checkpoint_topic`` are templates over
    ``{prefix}`` (default: the pipeline name), ``{pipeline}``, ``{schema}`` and ``{table}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["kafka"] = "kafka"
    bootstrap_servers: str = Field(min_length=1)
    """``host:port[,host:port...]`` of the brokers."""
    topic: str = "{prefix}.{schema}.{table}"
    prefix: str | None = None
    format: str = "native"
    format_options: dict[str, Any] = Field(default_factory=dict)
    delivery: Literal["at-least-once", "exactly-once"] = "at-least-once"
    transactional_id: str | None = None
    """exactly-once: the producer's ``transactional.id`` (default ``dblog-{pipeline}``); every
    instance of one pipeline must use the same, or a deposed leader is not fenced. Ignored
    with at-least-once."""
    checkpoint_topic: str = "{prefix}.dblog-checkpoint"
    transaction_topic: str | None = None
    """Where BEGIN/COMMIT markers go (one partition, in order); unset: they are not sent."""
    tombstones: bool = True
    producer: dict[str, Any] = Field(default_factory=dict)
    """Extra librdkafka producer settings (security, compression, batching...)."""
    connect_timeout_s: float = Field(30.0, gt=0)
    flush_timeout_s: float = Field(30.0, gt=0)
    transaction_timeout_s: float = Field(60.0, ge=1, le=900)

    @field_validator("topic")
    @classmethod
    def _template(cls, value: str) -> str:
        return check_topic_template(value, "topic")

    @field_validator("checkpoint_topic", "transaction_topic")
    @classmethod
    def _pipeline_template(cls, value: str | None, info: Any) -> str | None:
        """Topics of the whole pipeline: no table placeholders."""
        allowed = frozenset({"prefix", "pipeline"})
        return None if value is None else check_topic_template(value, info.field_name, allowed)

    @field_validator("bootstrap_servers")
    @classmethod
    def _servers(cls, value: str) -> str:
        for server in value.split(","):
            host, colon, port = server.strip().rpartition(":")
            if not colon or not host or not port.isdigit():
                raise ValueError(f"bootstrap_servers: {server.strip()!r} is not host:port "
                                 "(e.g. bootstrap_servers: kafka1:9092,kafka2:9092)")
        return value

    @field_validator("producer")
    @classmethod
    def _overrides(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if key in _REFUSED:
                raise ValueError(f"producer.{key} cannot be overridden: {_REFUSED[key]}")
        partitioner = value.get("partitioner", "murmur2_random")
        if partitioner not in _KEYED_PARTITIONERS:
            raise ValueError(f"producer.partitioner {partitioner!r} would send one key's records "
                             "to different partitions than Java clients (per-key order and "
                             "compaction need murmur2): use murmur2_random or murmur2, or "
                             "remove producer.partitioner")
        return value

    @property
    def transaction_timeout(self) -> float:
        """Seconds the broker lets a transaction stay open (``producer`` may set it in ms)."""
        raw = self.producer.get("transaction.timeout.ms")
        return self.transaction_timeout_s if raw is None else float(raw) / 1000

    @property
    def exactly_once(self) -> bool:
        return self.delivery == "exactly-once"

    def producer_settings(self, pipeline: str, on_error: Any, logger: Any) -> dict[str, Any]:
        """librdkafka settings for this output's producer."""
        settings: dict[str, Any] = {**PRODUCER_DEFAULTS, **self.producer,
                                    "bootstrap.servers": self.bootstrap_servers,
                                    "error_cb": on_error, "logger": logger}
        settings.setdefault("client.id", f"dblog-{pipeline}")
        if self.exactly_once:
            settings["transactional.id"] = self.transactional_id or f"dblog-{pipeline}"
            settings.setdefault("transaction.timeout.ms", int(self.transaction_timeout_s * 1000))
        return settings

    def client_settings(self, logger: Any) -> dict[str, Any]:
        """Settings an admin client or consumer shares with the producer (servers, security,
        the logger librdkafka's messages go to)."""
        shared = {k: v for k, v in self.producer.items() if k.startswith(_SHARED_PREFIXES)}
        return {**shared, "bootstrap.servers": self.bootstrap_servers, "logger": logger}

    def topic_values(self, pipeline: str) -> dict[str, str]:
        return {"prefix": self.prefix if self.prefix is not None else pipeline,
                "pipeline": pipeline}
