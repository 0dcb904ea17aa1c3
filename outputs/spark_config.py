"""The Spark output's configuration (``type: spark`` in ``outputs``); docs/outputs/spark.md.

One Spark session per pipeline (``master``, ``app_name``, ``conf``; or the caller's own session
when dblog runs inside a Spark driver) writes each flush to its ``sinks``:

* ``delta``: replica tables through delta-spark, the same layout as the ``delta`` output
  (:mod:`dblog.outputs.delta_table`): path-based (``path``) or catalog tables (``database``);
* ``kafka``: Spark's own Kafka sink, the same topics, keys, formats and headers as the
  ``kafka`` output (:mod:`dblog.outputs.kafka_records`); at-least-once.

Why the jars are named rather than resolved: a session that fetches ``spark.jars.packages``
at start needs Maven Central on every start; dblog's set-up script fetches them once
(``scripts/java/spark/pom.xml``) and the session gets files.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dblog.outputs.kafka_config import check_topic_template

_TABLE_FIELDS = frozenset({"schema", "table"})


class SparkDeltaSink(BaseModel):
    """Replica Delta tables written with delta-spark MERGEs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["delta"] = "delta"
    path: str | None = None
    """Path-based tables: one folder per source table under it, and ``_dblog_checkpoint``."""
    table_path: str = "{schema}.{table}"
    database: str | None = None
    """Catalog tables instead: ``<database>.<table_name>`` and ``<database>._dblog_checkpoint``."""
    table_name: str = "{schema}_{table}"
    pipeline: str | None = None
    partition_by: dict[str, list[str]] = Field(default_factory=dict)
    """Per source table (``schema.table``): partition columns of a table dblog creates."""
    tombstone_margin: int | None = Field(None, ge=0)
    purge_interval_s: float = Field(600.0, ge=0)
    checkpoint_interval_s: float = Field(30.0, ge=0)
    """The checkpoint row is rewritten at most this often (and whenever the guard scheme or a
    truncate barrier changes): it is a MERGE of its own, about as long as a table's. A
    checkpoint older than the data only means a restart replays more, which the guards make
    harmless. 0: with every flush."""

    @field_validator("table_path", "table_name")
    @classmethod
    def _template(cls, value: str, info: Any) -> str:
        return check_topic_template(value, info.field_name, _TABLE_FIELDS)

    @model_validator(mode="after")
    def _one_place(self) -> SparkDeltaSink:
        if (self.path is None) == (self.database is None):
            raise ValueError("a delta sink needs exactly one of path (path-based tables) or "
                             "database (catalog tables)")
        return self


class SparkKafkaSink(BaseModel):
    """dblog's Kafka topics written with Spark's Kafka sink (spark-sql-kafka)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["kafka"] = "kafka"
    bootstrap_servers: str = Field(min_length=1)
    topic: str = "{prefix}.{schema}.{table}"
    prefix: str | None = None
    format: str = "native"
    format_options: dict[str, Any] = Field(default_factory=dict)
    transaction_topic: str | None = None
    tombstones: bool = True
    options: dict[str, str] = Field(default_factory=dict)
    """Extra options of Spark's Kafka sink, e.g. ``kafka.security.protocol``."""

    @field_validator("topic")
    @classmethod
    def _topic(cls, value: str) -> str:
        return check_topic_template(value, "topic")

    @field_validator("transaction_topic")
    @classmethod
    def _txn_topic(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return check_topic_template(value, "transaction_topic", frozenset({"prefix",
                                                                          "pipeline"}))

    @field_validator("options")
    @classmethod
    def _options(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if key in ("topic", "kafka.bootstrap.servers"):
                raise ValueError(f"options.{key} is set by the sink: use the topic and "
                                 "bootstrap_servers fields")
        return value

    def topic_values(self, pipeline: str) -> dict[str, str]:
        return {"prefix": self.prefix if self.prefix is not None else pipeline,
                "pipeline": pipeline}


SparkSink = Annotated[SparkDeltaSink | SparkKafkaSink, Field(discriminator="type")]


class SparkConfig(BaseModel):
    """``type: spark`` output."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["spark"] = "spark"
    master: str = "local[*]"
    app_name: str = "dblog"
    conf: dict[str, str] = Field(default_factory=dict)
    """Spark settings for the session dblog starts (ignored for an embedded session)."""
    jars: list[str] | None = None
    """The connector jars: None takes the folder scripts/setup.sh fills
    (``DBLOG_SPARK_JARS_DIR``, else ``~/.cache/dblog/jars/spark``); ``[]`` when the cluster
    provides the packages itself (``spark.jars.packages`` in ``conf``, or its image)."""
    sinks: list[SparkSink] = Field(min_length=1)
    connect_timeout_s: float = Field(10.0, gt=0)
    """How long reaching the master may take before the output gives up (at open)."""
    commit_interval_s: float = Field(10.0, ge=0)
    """A flush writes only when the last one is this old (or commit_every events wait): each
    is a Spark job per sink and table with a fixed cost of about a second, and the engine asks
    for a flush every second. Acknowledgements lag by as much; 0: every flush writes."""
    commit_idle_s: float | None = Field(None, ge=0)
    """A flush also writes once events wait and none arrived for this long: the end of a burst
    (a dump's last rows, a stream gone quiet) is acknowledged after this pause rather than up
    to ``commit_interval_s`` later. Off (None) by default: under a trickle of events it writes
    about once per pause, and each write costs Spark jobs and a Delta version."""
    commit_every: int = Field(100_000, ge=1)
    """Write on its own once this many events are buffered (bounds the buffer). Larger than
    the delta output's 50,000: a Spark commit's fixed cost (a job per table and the checkpoint
    row, about a second each here) is larger."""

    @field_validator("master")
    @classmethod
    def _master(cls, value: str) -> str:
        known = ("local", "spark://", "yarn", "k8s://", "mesos://")
        if not value.startswith(known):
            raise ValueError(f"master {value!r} is not a Spark master URL: use local[*], "
                             "spark://host:7077, yarn or k8s://https://host:port")
        return value

    @model_validator(mode="after")
    def _one_delta(self) -> SparkConfig:
        if sum(isinstance(s, SparkDeltaSink) for s in self.sinks) > 1:
            raise ValueError("sinks: at most one delta sink per spark output (it holds the "
                             "pipeline's checkpoint); add a second spark output for another")
        return self

    @property
    def delta(self) -> SparkDeltaSink | None:
        return next((s for s in self.sinks if isinstance(s, SparkDeltaSink)), None)

    @property
    def kafka(self) -> list[SparkKafkaSink]:
        return [s for s in self.sinks if isinstance(s, SparkKafkaSink)]
