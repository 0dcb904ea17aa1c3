"""MariaDB restarts (SIGTERM and SIGKILL) mid-dump and mid-stream with writers running: the
connector rides them out by itself and the replay equals the source; a first run killed before
its first commit resumes from its recorded start, not from "now" (issue 15).

These tests restart their own server, so they start one for the module.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dblog.app.pipeline import Pipeline
from dblog.core.model import ChangeEvent, Op
from dblog.engine import EngineSettings
from dblog.outputs.jsonl import JsonlOutput

from .mysql_fixtures import admin_connect
from .pgutil import dump_state, read_events, replayed, wait_until
from .sources import Kit

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    from dblog.harness.mariadb import start_mariadb
    from dblog.harness.postgres import HarnessError
    from tests.conftest import unavailable

    try:
        maria = start_mariadb()
    except (HarnessError, FileNotFoundError) as exc:
        unavailable("MariaDB", str(exc))
        return
    try:
        yield maria
    finally:
        maria.stop()


@pytest.fixture()
def kit(server: Any, request: pytest.FixtureRequest) -> Kit:
    name = "r_" + request.node.name.split("[")[-1].strip("]").lower()[:20]
    conn = admin_connect(server.dsn())
    with conn.cursor() as cur:  # type: ignore[attr-defined]
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cur.execute(f"CREATE DATABASE `{name}`")
    conn.close()  # type: ignore[attr-defined]
    return Kit("mariadb", server.dsn(name))


class Writer(threading.Thread):
    """Random single-row inserts, updates and deletes; rides out the restarts (reconnects)."""

    def __init__(self, kit: Kit, seed: int, rows: int) -> None:
        super().__init__(daemon=True)
        self.kit, self.rng, self.rows = kit, random.Random(seed), rows
        self.stop = threading.Event()
        self.done = self.failed = 0

    def _one(self, cur: Any) -> None:
        key, op = self.rng.randrange(1, self.rows * 2), self.rng.random()
        if op < 0.5:
            cur.execute("UPDATE t_r SET ver = ver + 1, v = %s WHERE id = %s",
                        (f"u{self.done}", key))
        elif op < 0.75:
            cur.execute("DELETE FROM t_r WHERE id = %s", (key,))
        else:
            cur.execute("INSERT INTO t_r VALUES (%s, 0, 'w') ON DUPLICATE KEY UPDATE "
                        "ver = ver + 1", (key,))

    def run(self) -> None:
        conn: Any = None
        while not self.stop.is_set():
            try:
                if conn is None:
                    conn = admin_connect(self.kit.dsn.rsplit("/", 1)[0] + "/",
                                         self.kit.schema)
                with conn.cursor() as cur:
                    self._one(cur)
                self.done += 1
            except Exception:  # the server is restarting
                self.failed += 1
                conn = None
                time.sleep(0.1)


def _pipeline(kit: Kit, tmp: Path) -> Pipeline:
    from dblog.connectors.mysql import MysqlConnector

    config = {**kit.source_config("restart"), "tables": [kit.table("t_r")]}
    settings = EngineSettings(chunk_size=200, flush_interval_s=0.1, heartbeat_interval_s=0.5,
                              chunk_delay_s=0.02)
    return Pipeline(MysqlConnector(config, "restart"),
                    [JsonlOutput({"path": str(tmp / "out.jsonl")})],
                    state_path=str(tmp / "state.json"), settings=settings, max_restarts=50)


def _dumped(pipeline: Pipeline, dump_id: str) -> int:
    status = pipeline.dump_status(dump_id) or {"tables": []}
    return sum(int(t["rows"]) for t in status["tables"])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["term", "kill"])
def test_capture_rides_out_server_restarts_mid_dump_and_mid_stream(
        server: Any, kit: Kit, tmp_path: Path, sig: signal.Signals) -> None:
    kit.execute("CREATE TABLE t_r (id int PRIMARY KEY, ver int NOT NULL, v varchar(20))")
    kit.execute("INSERT INTO t_r SELECT seq, 0, 'init' FROM seq_1_to_20000")
    pipeline = _pipeline(kit, tmp_path).start()
    writers = [Writer(kit, seed, 20000) for seed in (1, 2)]
    try:
        for writer in writers:
            writer.start()
        dump_id = pipeline.dump([kit.table("t_r")])
        wait_until(lambda: _dumped(pipeline, dump_id) > 3000, 60, "dump progress")
        server.restart(down_s=1.0, sig=sig)  # mid-dump
        wait_until(lambda: dump_state(pipeline, dump_id) == "done", 180, "the dump")
        done = sum(w.done for w in writers)
        wait_until(lambda: sum(w.done for w in writers) > done + 500, 60, "writes after it")
        server.restart(down_s=1.0, sig=sig)  # mid-stream
        done = sum(w.done for w in writers)
        wait_until(lambda: sum(w.done for w in writers) > done + 500, 60, "writes after it")
        for writer in writers:
            writer.stop.set()
            writer.join(30)
        target = kit.current_position()

        def caught_up() -> bool:
            position = pipeline.status()["committed_position"]
            return position is not None and kit.parse_position(position) >= target

        wait_until(caught_up, 180, "the stream to catch up after the restarts")
    finally:
        for writer in writers:
            writer.stop.set()
        pipeline.stop()
    assert all(w.failed > 0 for w in writers), "the writers saw the restarts"
    events = read_events(tmp_path / "out.jsonl")
    reads = {tuple(e["key"]) for e in events if e["op"] == "read" and e["dump_id"] == dump_id}
    assert len(reads) > 15000
    assert replayed(events) == kit.source_rows([kit.table("t_r")])


def test_a_first_run_resumes_from_its_recorded_start(kit: Kit) -> None:
    """Nothing committed yet: a second start without a position reads from where the first
    started; once a position is acknowledged, the record is gone."""
    from dblog.connectors.mysql import MysqlConnector

    kit.execute("CREATE TABLE t_r (id int PRIMARY KEY, ver int NOT NULL, v varchar(20))")
    config = {**kit.source_config("first"), "tables": [kit.table("t_r")]}

    def inserted_ids(connector: MysqlConnector) -> list[int]:
        reader = connector.log_reader()
        reader.start(None)
        seen: list[int] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(seen) < 3:
            seen += [i.key[0] for i in reader.poll(0.2)
                     if isinstance(i, ChangeEvent) and i.op is Op.INSERT and i.key]
        reader.close()
        return seen

    first = MysqlConnector(config, "first")
    first.prepare()
    reader = first.log_reader()
    reader.start(None)  # records the start, then "crashes" before any commit
    reader.close()
    first.close()
    kit.execute("INSERT INTO t_r VALUES (1, 0, 'a'), (2, 0, 'b'), (3, 0, 'c')")
    second = MysqlConnector(config, "first")
    assert inserted_ids(second) == [1, 2, 3], "rows written before the restart were skipped"
    reader = second.log_reader()
    reader.start(kit.current_position())
    reader.acknowledge(kit.current_position())  # the first commit drops the record
    reader.close()
    kit.execute("INSERT INTO t_r VALUES (4, 0, 'd')")
    third = MysqlConnector(config, "first")
    reader = third.log_reader()
    reader.start(None)  # no record: starts at the current position
    kit.execute("INSERT INTO t_r VALUES (5, 0, 'e')")
    items = [i for _ in range(10) for i in reader.poll(0.2)]
    reader.close()
    second.close()
    third.close()
    assert [i.key[0] for i in items if isinstance(i, ChangeEvent) and i.op is Op.INSERT
            and i.key] == [5]
