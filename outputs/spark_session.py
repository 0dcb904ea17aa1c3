"""The Spark output's session: started once per pipeline with the connector jars, checked
before any event is consumed, and the one bridge from Arrow to Spark DataFrames.

Checks, each a :class:`~dblog.errors.FatalOutputError` naming the fix, in the order a start
would hit them (``open`` runs them, before the engine reads the log):

* the master: a ``spark://`` (or ``k8s://``) master that does not accept a TCP connection
  within ``connect_timeout_s`` (Spark itself retries for a minute, then fails far from the
  cause);
* the jars: the files scripts/setup.sh fetched (or those named in ``jars``) are all there,
  and after the start the session can load Delta's and Kafka's classes (a session already
  running in the process without them cannot take them any more: the JVM's class path is
  fixed).

Arrow to Spark: a ``pyarrow.Table`` becomes a DataFrame through the Arrow IPC stream PySpark
itself uses for ``createDataFrame(pandas)``, without pandas and without a Python object per
value (``PythonSQLUtils.toDataFrame``).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pyarrow as pa

from dblog.errors import FatalOutputError
from dblog.harness.postgres import HarnessError
from dblog.harness.spark import (
    CONNECTOR_PREFIXES,
    DELTA_CATALOG,
    DELTA_EXTENSION,
    SCALA,
    spark_jars,
    spark_jars_folder,
)

from .spark_config import SparkConfig

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SETUP_FIX = ("run `bash scripts/setup.sh` (fetches the connector jars into "
             "~/.cache/dblog/jars/spark), or name the files in the output's jars field")
DELTA_CLASS = "io.delta.tables.DeltaTable"
KAFKA_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
DELTA_JARS = (f"delta-spark_{SCALA}-", "delta-storage-")
KAFKA_JARS = tuple(p for p in CONNECTOR_PREFIXES if p not in DELTA_JARS)


def jvm(spark: SparkSession) -> Any:
    """The py4j view of the driver JVM (Delta's log, Kafka's client, Arrow's readers)."""
    context: Any = spark.sparkContext
    return context._jvm


def master_endpoints(master: str) -> list[tuple[str, int]]:
    """The host:port pairs a master URL makes the driver connect to (none for local/yarn)."""
    if master.startswith("spark://"):
        out = []
        for part in master[len("spark://"):].split(","):
            host, _, port = part.strip().rpartition(":")
            out.append((host, int(port) if port.isdigit() else 7077))
        return out
    if master.startswith("k8s://"):
        url = urlsplit(master[len("k8s://"):])
        if url.hostname:
            return [(url.hostname, url.port or (443 if url.scheme == "https" else 80))]
    return []


def check_master(master: str, timeout: float) -> None:
    """Refuse a cluster master that does not accept connections (before starting a JVM)."""
    for host, port in master_endpoints(master):
        try:
            with socket.create_connection((host, port), timeout=timeout):
                pass
        except OSError as exc:
            raise FatalOutputError(
                f"the Spark master {master} is unreachable: {host}:{port}: {exc}",
                fix="start the master (or fix host and port in the spark output's master "
                    "field), or use master: local[*] to run Spark inside dblog") from None


def connector_jars(config: SparkConfig, kafka: bool) -> list[str]:
    """The jar files the session gets through ``spark.jars``."""
    if config.jars is None:
        try:
            found = spark_jars()
        except HarnessError as exc:
            raise FatalOutputError(f"Spark connector jars: {exc}", fix=SETUP_FIX) from None
        return found
    missing = [j for j in config.jars if not Path(j).is_file()]
    if missing:
        raise FatalOutputError(f"Spark connector jars not found: {missing}", fix=SETUP_FIX)
    names = [Path(j).name for j in config.jars]
    needed = (DELTA_JARS if config.delta is not None else ()) + (KAFKA_JARS if kafka else ())
    absent = [p for p in needed if config.jars and not any(n.startswith(p) for n in names)]
    if absent:
        raise FatalOutputError(f"the spark output's jars lack {absent}", fix=SETUP_FIX +
                               f" (the folder is {spark_jars_folder()})")
    return [str(Path(j).resolve()) for j in config.jars]


def session_settings(config: SparkConfig, jars: list[str]) -> dict[str, str]:
    """What dblog sets on a session it starts (``conf`` overrides all but the jars)."""
    settings = {"spark.sql.session.timeZone": "UTC", "spark.ui.showConsoleProgress": "false",
                "spark.sql.extensions": DELTA_EXTENSION,
                "spark.sql.catalog.spark_catalog": DELTA_CATALOG}
    if config.master.startswith("local"):
        cores = str(min(os.cpu_count() or 2, 8))
        settings.update({"spark.sql.shuffle.partitions": cores,
                         "spark.databricks.delta.snapshotPartitions": cores,
                         "spark.driver.host": "127.0.0.1",
                         "spark.driver.bindAddress": "127.0.0.1"})
    settings.update(config.conf)
    if jars:
        settings["spark.jars"] = ",".join([*jars, *filter(None, config.conf.get(
            "spark.jars", "").split(","))])
    return settings


def start_session(config: SparkConfig, kafka: bool) -> tuple[SparkSession, bool]:
    """The pipeline's session, checked (see the module docstring), and whether this call
    started it (False: one was running in the process already and is shared)."""
    check_master(config.master, config.connect_timeout_s)
    jars = connector_jars(config, kafka)
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    context: Any = SparkContext
    owned = context._active_spark_context is None
    if config.master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(config.master).appName(config.app_name)
    for key, value in session_settings(config, jars).items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as exc:
        raise FatalOutputError(f"the Spark session did not start: {exc}",
                               fix="check the spark output's master and conf") from exc
    check_classes(session, config.delta is not None, kafka)
    return session, owned


def check_classes(spark: SparkSession, delta: bool, kafka: bool) -> None:
    """The session can load the connectors' classes (true of an embedded session too)."""
    utils = jvm(spark).org.apache.spark.util.Utils
    wanted = ([DELTA_CLASS] if delta else []) + ([KAFKA_CLASS] if kafka else [])
    absent = [name for name in wanted if not utils.classIsLoadable(name)]
    if absent:
        raise FatalOutputError(
            f"the Spark session cannot load {absent}: its class path lacks the connector jars",
            fix=SETUP_FIX + "; a session that was already running in this process without "
                "them must be stopped first (the JVM's class path is fixed at start)")
    if delta:
        extensions = spark.conf.get("spark.sql.extensions", "") or ""
        if DELTA_EXTENSION not in extensions:
            raise FatalOutputError(
                "the Spark session lacks Delta's SQL extension (MERGE INTO needs it)",
                fix=f"start it with spark.sql.extensions={DELTA_EXTENSION} and "
                    f"spark.sql.catalog.spark_catalog={DELTA_CATALOG}")


def arrow_frame(spark: SparkSession, table: pa.Table) -> DataFrame:
    """``table`` as a DataFrame (a local relation: Spark spreads it over
    ``defaultParallelism`` partitions; ``coalesce(1)`` where the row order matters)."""
    from pyspark.sql import DataFrame
    from pyspark.sql.pandas.serializers import ArrowStreamSerializer
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = from_arrow_schema(table.schema)
    view = jvm(spark)
    batches = table.combine_chunks().to_batches() or \
        [pa.RecordBatch.from_pylist([], schema=table.schema)]
    context: Any = spark.sparkContext
    stream = context._serialize_to_jvm(batches, ArrowStreamSerializer(),
                                       view.PythonSQLUtils.readArrowStreamFromFile,
                                       view.ArrowIteratorServer)
    session: Any = spark
    frame = view.PythonSQLUtils.toDataFrame(stream, schema.json(), session._jsparkSession)
    return DataFrame(frame, spark)
