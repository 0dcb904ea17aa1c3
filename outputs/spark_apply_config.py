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

Also here: which records the job reads (:func:`native`, :func:`tombstone`): native documents,
tombstones as deletes of their key; any other record is refused naming its place.
"""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Any, Literal

import orjson
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dblog.core.model import Op, TableId
from dblog.errors import ConfigError, FatalOutputError

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
    topic: str | None = None
    """The ``kafka`` output's ``topic`` template with ``{prefix}``/``{pipeline}`` written out
    (``shop.{schema}.{table}``): the table of a tombstone whose topic had no other record in
    the run (a compacted topic can keep only the tombstone of a deleted key)."""

    @model_validator(mode="after")
    def _subscription(self) -> ApplyKafka:
        if (self.topics is None) == (self.topic_pattern is None):
            raise ValueError("kafka: set exactly one of topics (a list) or topic_pattern")
        if self.topics is not None and not self.topics:
            raise ValueError("kafka.topics is empty: name at least one topic")
        if self.topic is not None and sorted(
                f for _, f, _, _ in string.Formatter().parse(self.topic) if f is not None
        ) != ["schema", "table"]:
            raise ValueError("kafka.topic: use {schema} and {table} once each, the other "
                             "parts written out (shop.{schema}.{table})")
        return self

    def table_of(self, topic: str) -> tuple[str, str] | None:
        """(schema, table) of ``topic`` by the ``topic`` template (None: no template, or the
        topic does not fit it)."""
        if self.topic is None:
            return None
        pattern = "".join(re.escape(text) + ("" if field is None else f"(?P<{field}>.+?)")
                          for text, field, _, _ in string.Formatter().parse(self.topic))
        found = re.fullmatch(pattern, topic)
        return None if found is None else (found["schema"], found["table"])


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


# The job reads dblog native records only (kafka.format): what decode() keeps or refuses.

_OPS = frozenset(op.value for op in Op)
_SKIPPED = frozenset({Op.BEGIN, Op.COMMIT, Op.SCHEMA})


def where(row: Any) -> str:
    return f"topic {row['topic']} partition {row['partition']} offset {row['offset']}"


def refuse(row: Any, what: str) -> FatalOutputError:
    return FatalOutputError(
        f"spark-apply: the record at {where(row)} is {what}; the job reads only topics "
        "that dblog's kafka output writes with format: native",
        fix="subscribe the job (kafka.topics or kafka.topic_pattern) to native topics only; "
            "a debezium-json or canal-json topic needs a consumer of that format")


def _shape(doc: Any) -> str:
    if isinstance(doc, dict) and {"source", "op", "after"} <= doc.keys():
        return "a debezium-json record, not a native one"
    if isinstance(doc, dict) and {"data", "type", "isDdl"} <= doc.keys():
        return "a canal-json record, not a native one"
    return "not a dblog native record"


def native(row: Any) -> dict[str, Any] | None:
    """The native document of a row with a value; None for a transaction marker or a
    checkpoint record of the kafka output (left out); anything else is refused."""
    try:
        doc = orjson.loads(bytes(row["value"]))
    except orjson.JSONDecodeError:
        raise refuse(row, "not JSON") from None
    if isinstance(doc, dict) and "op" not in doc and {"pipeline", "state"} <= doc.keys():
        return None  # the kafka output's checkpoint topic
    op = doc.get("op") if isinstance(doc, dict) else None
    if op in _OPS and Op(op) in _SKIPPED:
        return None
    if op not in _OPS or not isinstance(doc.get("schema"), str) \
            or not isinstance(doc.get("table"), str):
        raise refuse(row, _shape(doc))
    kept: dict[str, Any] = doc
    return kept


def tombstone(row: Any, table: TableId | None) -> dict[str, Any]:
    """A null value: the delete of its key (on a compacted topic the delete record before it
    can be gone). The key is native's, a JSON array of the key's values."""
    try:
        key = None if row["key"] is None else orjson.loads(bytes(row["key"]))
    except orjson.JSONDecodeError:
        key = None
    if not isinstance(key, list):
        raise refuse(row, "a tombstone whose key is not a native key (a JSON array)")
    if table is None:
        raise FatalOutputError(
            f"spark-apply: cannot tell the table of the tombstone at {where(row)}: no other "
            "record of its topic was read in this run",
            fix="set kafka.topic in the job's configuration to the kafka output's topic "
                "template with its prefix written out (shop.{schema}.{table})")
    return {"seq": -1, "op": Op.DELETE.value, "schema": table.schema, "table": table.name,
            "key": key}


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
