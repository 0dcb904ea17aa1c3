"""A local Spark session with the real Delta and Kafka connectors, for tests and benchmarks.

PySpark is pinned in pyproject.toml and its connectors in ``scripts/java/spark/pom.xml``
(``delta-spark_2.12``, ``spark-sql-kafka-0-10_2.12`` and the dependencies Spark does not ship
itself: ``delta-storage``, ``spark-token-provider-kafka-0-10``, ``kafka-clients``,
``commons-pool2``). ``scripts/setup.sh`` copies them with mvn into
``~/.cache/dblog/jars/spark`` (``DBLOG_JARS_DIR`` moves the parent folder,
``DBLOG_SPARK_JARS_DIR`` names the folder outright). The session gets them through
``spark.jars``: nothing is resolved or downloaded when it starts (no ``spark.jars.packages``),
so a session starts the same offline as online, and a jar that does not match the installed
PySpark is an error here rather than a ``NoSuchMethodError`` in the middle of a write.

A session costs seconds to start: share one per test module.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from dblog.harness.kafka import jars_dir
from dblog.harness.postgres import HarnessError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SCALA = "2.12"
CONNECTOR_PREFIXES = (f"delta-spark_{SCALA}-", "delta-storage-",
                      f"spark-sql-kafka-0-10_{SCALA}-", f"spark-token-provider-kafka-0-10_{SCALA}-",
                      "kafka-clients-", "commons-pool2-")
"""Every jar the connectors need beyond Spark's own (pyspark/jars)."""

FAST_START_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""The driver JVM compiles with C1 only: short test jobs spend less time compiling (seen here
on a loaded two-core machine: a write, a count, two MERGEs and a collect on a two-row Delta
table took 21-34 s against 35-71 s with the default compilers). Long benchmarks should override
``spark.driver.extraJavaOptions`` through ``extra_conf`` to get the optimising compiler."""

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def spark_jars_folder() -> Path:
    explicit = os.environ.get("DBLOG_SPARK_JARS_DIR")
    return Path(explicit) if explicit else jars_dir() / "spark"


def _pyspark_version() -> str:
    try:
        import pyspark
    except ImportError as exc:
        raise HarnessError("pyspark is not installed; run `bash scripts/setup.sh` (installs the "
                           "test extras) or `pip install -e '.[spark]'`") from exc
    version: str = pyspark.__version__
    return version


def spark_jars(folder: Path | None = None) -> list[str]:
    """The connector jars for the installed PySpark, as absolute paths; raises
    :class:`HarnessError` naming the fix when one is missing or built for another Spark."""
    folder = folder or spark_jars_folder()
    version = _pyspark_version()
    jars = sorted(folder.glob("*.jar"))
    names = [jar.name for jar in jars]
    fix = "run `bash scripts/setup.sh` (fetches them with mvn from scripts/java/spark/pom.xml)"
    missing = [p for p in CONNECTOR_PREFIXES if not any(n.startswith(p) for n in names)]
    if missing:
        raise HarnessError(f"Spark connector jars missing in {folder}: {missing}; {fix}")
    kafka_sql = f"spark-sql-kafka-0-10_{SCALA}-{version}.jar"
    if kafka_sql not in names:
        found = [n for n in names if n.startswith(f"spark-sql-kafka-0-10_{SCALA}-")]
        raise HarnessError(f"{folder} holds {found}, not {kafka_sql} for the installed pyspark "
                           f"{version}; pin the same Spark version in pyproject.toml and "
                           f"scripts/java/spark/pom.xml and {fix}")
    return [str(jar.resolve()) for jar in jars]


def session_conf(jars: list[str], warehouse: Path, shuffle_partitions: int = 2,
                 extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Spark settings for a small local session with Delta's SQL extension and catalog: few
    shuffle partitions (the default 200 costs seconds per small MERGE), no UI, loopback only,
    UTC, the warehouse in ``warehouse`` rather than the working directory."""
    conf = {
        "spark.jars": ",".join(jars),
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        "spark.sql.catalogImplementation": "in-memory",
        "spark.sql.warehouse.dir": str(warehouse),
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.default.parallelism": str(shuffle_partitions),
        "spark.databricks.delta.snapshotPartitions": str(shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.memory": "1g",
        "spark.driver.extraJavaOptions": FAST_START_JVM,
    }
    conf.update(extra or {})
    return conf


def local_spark_session(app_name: str = "dblog-test", master: str = "local[*]",
                        extra_conf: Mapping[str, str] | None = None,
                        warehouse: Path | None = None) -> SparkSession:
    """Start (or reuse) the process's Spark session with the connector jars. A session that
    is already running in this process without them cannot take them any more (the JVM's
    class path is fixed): that raises :class:`HarnessError` instead of failing later."""
    jars = spark_jars()
    from pyspark.sql import SparkSession

    # the JVM otherwise picks the host's first non-loopback address for its own name
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    warehouse = warehouse or Path(tempfile.mkdtemp(prefix="dblog-spark-warehouse-"))
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in session_conf(jars, warehouse, extra=extra_conf).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    loaded = session.sparkContext.getConf().get("spark.jars") or ""
    absent = [jar for jar in jars if jar not in loaded.split(",")]
    if absent:
        raise HarnessError(f"a Spark session was already running without {absent}; stop it "
                           "(SparkSession.stop) before asking for one with the connectors")
    session.sparkContext.setLogLevel("WARN")
    return session
