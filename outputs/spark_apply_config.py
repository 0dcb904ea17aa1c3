"""The configuration of the Spark apply job (``dblog spark-apply --config job.yaml``): which of
dblog's Kafka topics it reads, the Delta tables it keeps, where Spark keeps its progress.

Example::

    master: spark://spark-master:7077
    kafka:
      bootstrap_servers: kafka1:9092
      topic_pattern: "shop\\\\.public\\\\..*"    # or topics: [shop.public.orders]
    delta:
      path: s3a://lake/replica
    checkpoint_location: s3a://lake/_checkpoints/shop-apply
    tables:                                  # key columns and types (optional, see below)
      public.orders: {key: [id], columns: {id: bigint, total: "numeric(12,2)", note: text}}

Why ``tables``: dblog's native records carry a row's key *values* and its column values, not
the source's column types or key names. Without an entry the job infers them from the
records (the key columns as the after-image's columns holding the key values, a column's type
from its first value, numeric values then kept as text); an entry makes the Delta table the
one the ``delta`` and ``spark`` outputs would create.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dblog.errors import ConfigError

from .spark_config import SparkDeltaSink


class ApplyKafka(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    bootstrap_servers: str = Field(min_length=1)
    topics: list[str] | None = None
    topic_pattern: str | None = None
    """A Java regular expression over topic names (Spark's ``subscribePattern``)."""
    format: Literal["native"] = "native"
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    max_offsets_per_trigger: int | None = Field(100_000, gt=0)
    """Records per micro-batch at most (the batch is applied from the driver's memory)."""
    options: dict[str, str] = Field(default_factory=dict)
    """Extra options of Spark's Kafka source (``kafka.security.protocol``, ...)."""

    @model_validator(mode="after")
    def _subscription(self) -> ApplyKafka:
        if (self.topics is None) == (self.topic_pattern is None):
            raise ValueError("kafka: set exactly one of topics (a list) or topic_pattern")
        if self.topics is not None and not self.topics:
            raise ValueError("kafka.topics is empty: name at least one topic")
        return self


class TableSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    key: list[str] = Field(min_length=1)
    columns: dict[str, str] = Field(default_factory=dict)
    """Source column types as the connectors name them (``bigint``, ``numeric(10,2)``...)."""


class ApplyConfig(BaseModel):
    """``dblog spark-apply``: Spark's Kafka source into guarded Delta MERGEs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "dblog-apply"
    """Names the job's Delta transactions (``dblog:<name>``)."""
    master: str = "local[*]"
    app_name: str = "dblog-spark-apply"
    conf: dict[str, str] = Field(default_factory=dict)
    jars: list[str] | None = None
    connect_timeout_s: float = Field(10.0, gt=0)
    kafka: ApplyKafka
    delta: SparkDeltaSink
    checkpoint_location: str = Field(min_length=1)
    """Spark's own checkpoint (the offsets of each micro-batch): keep it with the tables."""
    trigger_interval_s: float = Field(5.0, gt=0)
    tables: dict[str, TableSpec] = Field(default_factory=dict)


def load_apply_config(path: str | Path) -> ApplyConfig:
    """The job's YAML file, or a ConfigError naming the field and the fix."""
    try:
        raw: Any = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}", fix="pass the job's YAML file "
                          "with --config") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} holds no mapping", fix="see docs/outputs/spark.md")
    try:
        return ApplyConfig(**raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ConfigError(f"{path}: {where}: {first['msg']}",
                          fix="see the apply job's settings in docs/outputs/spark.md") from None
