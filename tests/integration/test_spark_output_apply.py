"""The Spark apply job against real servers: dblog (a ``dblog run`` child process with the
``kafka`` output, at-least-once) captures PostgreSQL into Kafka while writers run and is
SIGKILLed once mid-dump; the apply job reads the topics with Spark's Kafka source and applies
them to Delta, is itself stopped and restarted from its Spark checkpoint once, and the Delta
tables it keeps (read with Spark, tombstones filtered) equal the source. One table's keys and
types come from the job's configuration, the others' are inferred from the records."""

from __future__ import annotations

import json
import random
import signal
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from dblog.core.model import Key, Row, TableId
from dblog.outputs.spark_apply import ApplyJob
from dblog.outputs.spark_apply_config import ApplyConfig
from dblog.outputs.sql_kinds import DELETED, from_db, kind_of

from .pgutil import wait_until
from .sources import Kit
from .test_crash import _dump_progress, _start
from .test_kafka_output_pipeline import CONFIG, _wait_state_position, kafka_config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration,
              pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning")]


def _create_topics(bootstrap: str, names: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, num_partitions=3, replication_factor=1)
                                   for n in names], operation_timeout=30)
    for future in futures.values():
        future.result(timeout=30)


def _delta_rows(spark: SparkSession, job: ApplyJob, root: Path, table: TableId
                ) -> dict[Key, Row]:
    info = job.tables.lookup(table)
    assert info is not None, f"the job never saw {table}"
    kinds = {c.name: kind_of(c.type_name) for c in info.columns}
    frame = spark.read.format("delta").load(str(root / f"{table.schema}.{table.name}"))
    out: dict[Key, Row] = {}
    for record in frame.where(f"{DELETED} = false").collect():
        raw = record.asDict()
        row = {c: from_db(kind, raw.get(c)) for c, kind in kinds.items()}
        out[tuple(row[k] for k in info.key_columns)] = row
    return out


def test_the_apply_job_restarted_from_its_checkpoint_rebuilds_the_source(
        pg_dsn: str, kafka_bootstrap: str, spark_session: SparkSession,
        tmp_path: Path) -> None:
    kit = Kit("postgres", pg_dsn)
    kit.create_schema(rows=1500)
    prefix = f"ap{uuid.uuid4().hex[:8]}"
    topics = [f"{prefix}.{t}" for t in kit.tables]
    _create_topics(kafka_bootstrap, topics)
    state, config, log = tmp_path / "state.json", tmp_path / "dblog.yaml", tmp_path / "log"
    config.write_text(CONFIG.format(
        source=json.dumps(kit.source_config("apply")), state=state,
        output=json.dumps(kafka_config(kafka_bootstrap, prefix, "at-least-once")),
        tables=json.dumps(kit.tables)))
    reader = kit.chunk_reader()
    t_int = reader.table_info(TableId.parse(kit.table("t_int")))
    reader.close()
    job_config = ApplyConfig(
        kafka={"bootstrap_servers": kafka_bootstrap, "topics": topics,
               "max_offsets_per_trigger": 3000},
        delta={"type": "delta", "path": str(tmp_path / "delta")},
        checkpoint_location=str(tmp_path / "spark-checkpoint"), trigger_interval_s=2,
        tables={kit.table("t_int"): {"key": list(t_int.key_columns),
                                     "columns": {c.name: c.type_name for c in t_int.columns}}})
    job = ApplyJob(job_config, spark_session)
    job.open()
    job.start()
    rng = random.Random(5)
    with kit.writers(rows=1500, count=2) as writers:
        proc = _start(config, log)
        target = rng.randint(3, 20)  # of about 90 chunks: the kill lands mid-dump on any machine
        wait_until(lambda: (_dump_progress(state) or (0, ""))[0] >= target, 300,
                   f"the dump to commit {target} chunks")
        progress = _dump_progress(state)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        wait_until(lambda: job.batches >= 1, 300, "a first micro-batch")
        job.stop()  # stopped mid-stream, restarted from its checkpoint
        applied_before = job.batches
        job = ApplyJob(job_config, spark_session)
        job.open()
        query = job.start()
        proc = _start(config, log)
        try:
            wait_until(lambda: (_dump_progress(state) or (0, ""))[1] == "done", 400,
                       "the dump to finish after the kill")
            writers.stop()
            _wait_state_position(kit, state)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    assert not writers.errors, writers.errors
    assert progress is not None and progress[1] != "done", f"the kill missed the dump: {progress}"
    query.processAllAvailable()
    job.stop()
    assert applied_before >= 1 and job.batches >= 1
    expected: dict[TableId, dict[Key, Row]] = {TableId.parse(t): {} for t in kit.tables}
    for (table, key), row in kit.source_rows(kit.tables).items():
        expected[TableId(*table)][key] = row
    for table, rows in expected.items():
        assert _delta_rows(spark_session, job, tmp_path / "delta", table) == rows, table
    assert job.tables.lookup(TableId.parse(kit.table("t_comp"))) is not None
