"""The CLI control commands against running ``dblog run`` processes, with a state file and
with ZooKeeper state (two candidates: the standby's API answers with the leader)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dblog.harness.postgres import HarnessError
from dblog.harness.zookeeper import start_zookeeper
from tests.conftest import unavailable

from .pgutil import wait_until
from .test_api_env import TOKEN, create_tables, database

pytestmark = pytest.mark.integration
ROWS = 5000

CONFIG = """
name: cli
source: {{type: postgres, dsn: "{dsn}", slot: "{slot}", tables: ["public.*"]}}
outputs: [{{type: jsonl, path: "{out}"}}]
state: {state}
engine: {{chunk_size: 100, chunk_delay_s: 0.05, flush_interval_s: 0.2,
          heartbeat_interval_s: 0.5}}
api: {{token_env: DBLOG_CLI_TOKEN}}
"""


class Deployment:
    """``dblog run`` processes of one configuration, and the CLI run against it."""

    def __init__(self, tmp: Path, dsn: str, state: str) -> None:
        self.tmp, self.config = tmp, tmp / "dblog.yaml"
        slot = "cli_" + uuid.uuid4().hex[:8]
        self.config.write_text(CONFIG.format(dsn=dsn, slot=slot, out=tmp / "out.jsonl",
                                             state=state))
        self.env = {**os.environ, "DBLOG_CLI_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1"}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str) -> None:
        with open(self.tmp / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "dblog", "run", "-c", str(self.config)],
                stdout=log, stderr=subprocess.STDOUT, env={**self.env, "DBLOG_INSTANCE": name})

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "dblog", *args, "-c", str(self.config)],
                              capture_output=True, text=True, timeout=120, env=self.env)

    def ok(self, *args: str) -> Any:
        done = self.cli(*args)
        assert done.returncode == 0, (args, done.stdout, done.stderr, self.logs())
        return json.loads(done.stdout)

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in self.tmp.glob("*.log"))

    def stop(self, name: str | None = None) -> None:
        for key, proc in self.procs.items():
            if name is None or key == name:
                proc.terminate()
                proc.wait(30)


def _exercise(dep: Deployment) -> None:
    """Every control command against the running leader."""
    status = dep.ok("status")
    assert status["running"] is True and status["lag_s"] is not None
    # the lag-bytes probe dblog run builds for its source (dblog/api/lagbytes.py)
    wait_until(lambda: dep.ok("status")["lag_bytes"] is not None, 30, "lag in bytes")
    assert status["tables"]["public.t_int"] == "streaming"
    refused = dep.cli("dump", "-t", "public.nope")
    assert refused.returncode == 2 and "public.nope" in refused.stderr, refused
    bad_key = dep.cli("dump", "-t", "public.t_int", "--keys", "[[1, 2]]")
    assert bad_key.returncode == 2 and "1 value(s)" in bad_key.stderr, bad_key
    bad_range = dep.cli("dump", "-t", "public.t_int", "--from", "one")
    assert bad_range.returncode == 2 and "column id (integer)" in bad_range.stderr, bad_range
    ranged = dep.ok("dump", "-t", "public.t_int", "--from", "11", "--to", "20")
    keys = dep.ok("dump", "-t", "public.t_int", "--keys", "1,2,3")
    dump = dep.ok("dump", "-t", "public.t_int")
    assert dump["tables"] == ["public.t_int"]
    assert dep.ok("pause", dump["dump_id"])["state"] == "paused"
    listed = {d["id"]: d for d in dep.ok("dumps", "--json")}
    assert listed[dump["dump_id"]]["state"] == "paused"
    assert listed[keys["dump_id"]]["state"] == "done" and listed[keys["dump_id"]]["rows"] == 3
    # dumps run in request order: the range (both ends included) finished before the keys
    assert listed[ranged["dump_id"]]["kind"] == "range"
    assert listed[ranged["dump_id"]]["state"] == "done" and listed[ranged["dump_id"]]["rows"] == 10
    assert dep.ok("set", "--chunk-size", "500", "--chunk-delay", "0") == \
        {"chunk_size": 500, "chunk_delay_s": 0.0}
    assert dep.ok("resume", dump["dump_id"])["state"] in ("queued", "running", "done")
    watched = dep.cli("dumps", "--watch")
    assert watched.returncode == 0 and dump["dump_id"] in watched.stdout, watched
    final = {d["id"]: d for d in dep.ok("dumps", "--json")}[dump["dump_id"]]
    assert final["state"] == "done" and final["rows"] == ROWS
    dep.ok("set", "--chunk-size", "50", "--chunk-delay", "0.2")
    other = dep.ok("dump")
    assert dep.ok("cancel", other["dump_id"])["state"] == "cancelled"
    again = dep.cli("cancel", other["dump_id"])
    assert again.returncode == 2 and "already cancelled" in again.stderr, again


def test_cli_with_a_state_file(pg_admin_dsn: str, tmp_path: Path) -> None:
    with database(pg_admin_dsn) as dsn:
        create_tables(dsn, ROWS)
        dep = Deployment(tmp_path, dsn, f'{{type: file, path: "{tmp_path / "state.json"}"}}')
        before = dep.cli("status")
        assert before.returncode == 3 and "not running" in before.stderr
        assert json.loads(before.stdout)["running"] is False
        dep.start("solo")
        try:
            wait_until(lambda: dep.cli("status").returncode == 0, 60, "the instance to run")
            _exercise(dep)
        finally:
            dep.stop()
        after = dep.cli("status")
        assert after.returncode == 3 and json.loads(after.stdout)["running"] is False
        assert json.loads(after.stdout)["committed_position"] is not None


@pytest.fixture(scope="module")
def zk_hosts() -> Iterator[str]:
    try:
        server = start_zookeeper()
    except (HarnessError, OSError) as exc:
        unavailable("ZooKeeper", str(exc))
    try:
        yield server.hosts
    finally:
        server.stop()


def test_cli_with_zookeeper_and_a_standby(pg_admin_dsn: str, zk_hosts: str,
                                          tmp_path: Path) -> None:
    from dblog.ha.election import read_leader
    from dblog.ha.zk import ZkPaths, connect

    root = f"/cli-{uuid.uuid4().hex[:8]}"
    with database(pg_admin_dsn) as dsn:
        create_tables(dsn, ROWS)
        dep = Deployment(tmp_path, dsn, f'{{type: zookeeper, hosts: "{zk_hosts}", root: '
                                        f'"{root}", session_timeout_s: 3, instance_id: '
                                        '"${DBLOG_INSTANCE:-cli}"}')
        client = connect(zk_hosts, 10.0)
        paths = ZkPaths.of(root, "cli")
        try:
            dep.start("n1")
            wait_until(lambda: dep.cli("status").returncode == 0, 60, "a leader")
            dep.start("n2")
            wait_until(lambda: client.exists(f"{paths.base}/api/n2") is not None, 60,
                       "the standby's API")
            leader = read_leader(client, paths)
            assert leader is not None and leader["instance"] == "n1"
            _standby_answers_with_the_leader(client, paths)
            _exercise(dep)
            assert dep.ok("status")["leader"]["instance"] == "n1"
        finally:
            dep.stop()
            client.stop()
            client.close()


def _standby_answers_with_the_leader(client: Any, paths: Any) -> None:
    urls = {name: json.loads(client.get(f"{paths.base}/api/{name}")[0])["api"]
            for name in ("n1", "n2")}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=urls["n2"], headers=headers, timeout=30) as standby:
        answer = standby.get("/api/v1/dumps")
        assert answer.status_code == 421, answer.text
        assert answer.json()["leader"]["api"] == urls["n1"]
        assert answer.json()["leader"]["instance"] == "n1"
        assert answer.headers["x-dblog-leader"] == urls["n1"]
        refused = standby.post("/api/v1/dumps", json={"tables": ["public.t_int"]})
        assert refused.status_code == 421 and "standby" in refused.json()["detail"]
        status = standby.get("/api/v1/status").json()
        assert status["role"] == "standby" and status["leader"]["instance"] == "n1"
        assert standby.get("/readyz").status_code == 503
    deadline = time.monotonic() + 10
    with httpx.Client(base_url=urls["n1"], headers=headers, timeout=30) as leader:
        while leader.get("/readyz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert leader.get("/api/v1/status").json()["role"] == "leader"
