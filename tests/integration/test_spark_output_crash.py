"""SIGKILL of the capture process with the Spark output into Delta: ``dblog run`` child processes
(each with its own local Spark session, from the YAML configuration) are killed during the
dump while writers run; the last one finishes it; the Delta tables, read with Spark (tombstones
filtered), equal the source. The driver JVM of a killed child exits with it (PySpark's gateway
watches its parent's pipe): no JVM is left behind."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from dblog.core.model import TableId
from tests.replica_targets import source_lookup

from .pgutil import wait_until
from .sources import Kit
from .test_crash import _dump_progress, _start
from .test_kafka_output_pipeline import _wait_state_position
from .test_spark_output import source_tables, spark_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration,
              pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning")]

CONFIG = """
name: sparkcrash
source: {source}
outputs:
  - {output}
state:
  path: "{state}"
engine:
  chunk_size: 50
  chunk_delay_s: 0.1
  flush_interval_s: 0.5
  heartbeat_interval_s: 1
initial_dumps:
  - tables: {tables}
"""


def _jvms(app: str) -> list[str]:
    found = subprocess.run(["pgrep", "-f", f"spark.app.name={app}"], capture_output=True,
                           text=True)
    return found.stdout.split()


def test_sigkill_during_dump_with_the_spark_output(pg_dsn: str, spark_session: SparkSession,
                                                    tmp_path: Path) -> None:
    kit = Kit("postgres", pg_dsn)
    kit.create_schema(rows=2000)
    app = f"dblog-crash-{tmp_path.name[-12:]}"
    output = {"type": "spark", "master": "local[2]", "app_name": app, "commit_interval_s": 2,
              "conf": {"spark.driver.memory": "1g", "spark.ui.enabled": "false",
                       "spark.sql.shuffle.partitions": "2",
                       "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 "
                                                        "-XX:+UseSerialGC"},
              "sinks": [{"type": "delta", "path": str(tmp_path / "delta")}]}
    state, config, log = tmp_path / "state.json", tmp_path / "dblog.yaml", tmp_path / "log"
    config.write_text(CONFIG.format(source=json.dumps(kit.source_config("sparkcrash")),
                                    output=json.dumps(output), state=state,
                                    tables=json.dumps(kit.tables)))
    rng = random.Random(3)
    kills_mid_dump = 0
    # paced: unpaced writers commit faster than a local Spark session on two loaded cores
    # MERGEs, and a capture that falls ever further behind never sees a dump's watermarks
    with kit.writers(2000, count=2, pause_s=0.05) as writers:
        for _ in range(2):
            before = (_dump_progress(state) or (0, ""))[0]
            proc = _start(config, log)

            def advanced(before: int = before) -> bool:
                return (_dump_progress(state) or (0, ""))[0] > before

            wait_until(advanced, 300, f"a chunk committed by this child: {log.read_text()[-2000:]}")
            time.sleep(rng.uniform(1.0, 3.0))
            assert _jvms(app), "the child's Spark JVM is not found (the check cannot fail)"
            progress = _dump_progress(state)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            kills_mid_dump += progress is not None and progress[1] != "done"
        wait_until(lambda: not _jvms(app), 60, "the killed children's JVMs to exit")
        proc = _start(config, log)
        try:
            wait_until(lambda: (_dump_progress(state) or (0, ""))[1] == "done", 600,
                       "the dump to finish after the kills")
            writers.stop()
            _wait_state_position(kit, state)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(120)
    assert not writers.errors, writers.errors
    assert kills_mid_dump == 2, f"a kill missed the dump: {log.read_text()[-3000:]}"
    reader = kit.chunk_reader()
    try:
        lookup = source_lookup(reader)
        expected = source_tables(kit)
        for table, rows in expected.items():
            assert spark_rows(spark_session, tmp_path / "delta", lookup, table) == rows, table
    finally:
        reader.close()
    assert sum(map(len, expected.values())) > 3000
    assert TableId.parse(kit.table("t_int")) in expected
    wait_until(lambda: not _jvms(app), 60, "the last child's JVM to exit")
