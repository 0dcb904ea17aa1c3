"""The Spark apply job against real servers: dblog (a ``dblog run`` child process with the
``kafka`` output, at-least-once) captures PostgreSQL into Kafka while writers run and is
SIGKILLed once mid-dump; the apply job reads the topics with Spark's Kafka source and applies
them to Delta, is itself stopped and restarted from its Spark checkpoint once, and the Delta
tables it keeps (read with Spark, tombstones filtered) equal the source. One table's keys and
types come from the job's configuration, the others' are inferred from the records.

Without a broker (micro-batches handed to ``apply_batch``, each by a new run of the job, as a
restart does): an inferred table keeps its stored types across restarts (a null first value
does not retype a column), a value its column cannot hold stops with the column and the fix,
and a key change keeping unchanged TOAST columns is left out with a warning naming why."""

from __future__ import annotations

import json
import random
import signal
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from dblog.core.model import Key, Row, TableId
from dblog.errors import FatalOutputError
from dblog.outputs.spark_apply import ApplyJob
from dblog.outputs.spark_apply_config import ApplyConfig, ApplyKafka
from dblog.outputs.spark_config import SparkDeltaSink
from dblog.outputs.sql_kinds import DELETED, from_db, kind_of

from .pgutil import wait_until
from .sources import Kit
from .test_crash import _dump_progress, _start
from .test_kafka_output_pipeline import CONFIG, _wait_state_position, kafka_config

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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


T = TableId("public", "t")


def _run(spark: SparkSession, root: Path, batch_id: int,
         rows: list[tuple[Any, ...]], topic: str | None = None) -> ApplyJob:
    """One micro-batch of Kafka rows (partition, offset, record[, key]) by a new run of the
    job; a record None is a tombstone of the key."""
    job = ApplyJob(ApplyConfig(kafka=ApplyKafka(bootstrap_servers="127.0.0.1:1", topics=["x"],
                                                topic=topic),
                               delta=SparkDeltaSink(path=str(root / "delta")),
                               checkpoint_location=str(root / "ck")), session=spark)
    job.open()
    frame: DataFrame = spark.createDataFrame(
        [("shop.public.t", p, o, orjson.dumps(d["key"] if d else key[0]),
          None if d is None else orjson.dumps(d)) for p, o, d, *key in rows],
        "topic string, partition int, offset long, key binary, value binary")
    job.apply_batch(frame, batch_id)
    return job


def _doc(seq: int, after: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"seq": seq, "op": "insert", "schema": "public", "table": "t", "key": [after["id"]],
            "after": after, **extra}


def test_a_restart_keeps_the_inferred_types_and_a_misfit_names_the_column(
        spark_session: SparkSession, tmp_path: Path) -> None:
    _run(spark_session, tmp_path, 0, [(0, 0, _doc(1, {"id": 1, "qty": 5}))])
    _run(spark_session, tmp_path, 1, [(0, 1, _doc(2, {"id": 2, "qty": None}))])  # was refused
    job = _run(spark_session, tmp_path, 2, [(0, 2, _doc(3, {"id": 3, "qty": 7}))])
    assert _delta_rows(spark_session, job, tmp_path / "delta", T) == {
        (1,): {"id": 1, "qty": 5}, (2,): {"id": 2, "qty": None}, (3,): {"id": 3, "qty": 7}}
    with pytest.raises(FatalOutputError) as raised:
        _run(spark_session, tmp_path, 3, [(0, 3, _doc(4, {"id": 4, "qty": "five"}))])
    assert "column qty holds int64" in raised.value.message and "seq 4" in raised.value.message
    assert raised.value.fix is not None and "tables.public.t.columns.qty" in raised.value.fix


def test_a_key_change_keeping_toast_columns_is_left_out_with_the_cause(
        spark_session: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Key 1 -> 2 keeping ``big``: the old key's delete in partition 0, the new row in 1."""
    _run(spark_session, tmp_path, 0, [(0, 0, _doc(1, {"id": 1, "big": "LARGE", "v": 10}))])
    moved = _doc(3, {"id": 2, "v": 20}, op="update", old_key=[1], unchanged=["big"])
    deleted = {"seq": 2, "op": "delete", "schema": "public", "table": "t", "key": [1]}
    with caplog.at_level("WARNING", logger="dblog.replica"):
        job = _run(spark_session, tmp_path, 1, [(0, 1, deleted), (1, 0, moved)])
    assert _delta_rows(spark_session, job, tmp_path / "delta", T) == {}
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert "the usual cause is a key change" in warning and "REPLICA IDENTITY FULL" in warning
    assert "--table public.t --keys '[[2]]'" in warning


def test_a_compacted_delete_leaves_only_its_tombstone_and_the_row_is_deleted(
        spark_session: SparkSession, tmp_path: Path) -> None:
    """Compaction keeps only the newest record of a key: key 1's delete record (offset 1) is
    gone, its tombstone (offset 2) is all a lagging job reads, in a later run that has read
    no other record of the topic: the template names the table, the tombstone deletes."""
    _run(spark_session, tmp_path, 0, [(0, 0, _doc(1, {"id": 1})), (0, 3, _doc(3, {"id": 2}))])
    job = _run(spark_session, tmp_path, 1, [(0, 2, None, [1])], topic="shop.{schema}.{table}")
    assert _delta_rows(spark_session, job, tmp_path / "delta", T) == {(2,): {"id": 2}}
