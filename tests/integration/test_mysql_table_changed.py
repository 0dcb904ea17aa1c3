"""A column dropped while a MariaDB table is dumped, between a chunk's low watermark and its
SELECT (the log reader has not seen the DDL yet, so the reader's query still names the column):
the server refuses the query (1054), the adapter raises TableChanged, and the engine reads the
chunk again with the table's fresh metadata. The dump ends done with every row."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from dblog.core.dumps import ChunkPlan
from dblog.engine import PhaseHooks

from .pgutil import dump_state, read_events, wait_until
from .sources import Kit
from .test_mysql import _catch_up, _pipeline

pytestmark = pytest.mark.integration


def test_a_column_dropped_while_dumping_is_read_again_not_failed(maria_dsn: str,
                                                                  tmp_path: Path) -> None:
    maria = Kit("mariadb", maria_dsn)
    maria.execute("DROP TABLE IF EXISTS t_drop")
    maria.execute("CREATE TABLE t_drop (id int PRIMARY KEY, v varchar(10), gone int)")
    maria.execute("INSERT INTO t_drop SELECT seq, 'init', seq FROM seq_1_to_600")
    altered = threading.Event()

    def after_low(plan: ChunkPlan) -> None:
        if plan.after == (150,) and not altered.is_set():
            maria.execute("ALTER TABLE t_drop DROP COLUMN gone")
            altered.set()

    pipeline = _pipeline(maria, tmp_path, chunk=50, hooks=PhaseHooks(after_low, None),
                         tables=[maria.table("t_drop")]).start()
    try:
        dump_id = pipeline.dump([maria.table("t_drop")])
        wait_until(lambda: dump_state(pipeline, dump_id) in ("done", "failed"), 60, "dump end")
        status = next(d for d in pipeline.status()["dumps"] if d["id"] == dump_id)
        _catch_up(pipeline, maria)
    finally:
        pipeline.stop()
    assert altered.is_set()
    assert status["state"] == "done", status
    reads = [e for e in read_events(tmp_path / "out.jsonl") if e["op"] == "read"]
    assert sorted(e["key"][0] for e in reads) == list(range(1, 601))
    late = [e for e in reads if e["key"][0] > 200]
    assert late and all("gone" not in e["after"] for e in late)
