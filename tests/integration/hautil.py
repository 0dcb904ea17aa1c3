"""Helpers for HA tests: several ``dblog run`` candidates as OS processes sharing one ZooKeeper,
one source and one jsonl output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from dblog.connectors.postgres.positions import Lsn
from dblog.core.acks import PipelineState
from dblog.ha.election import read_leader
from dblog.ha.zk import ZkPaths, ZooKeeperStateStore, connect
from dblog.state import state_from_json

from .pgutil import (
    check_commit_order,
    check_no_time_travel,
    current_lsn,
    read_events,
    replayed,
    source_rows,
    wait_until,
)

CONFIG = """
name: ha
source:
  type: postgres
  dsn: "{dsn}"
  slot: ha
  tables: ["public.*"]
outputs:
  - type: jsonl
    path: "{out}"
state:
  type: zookeeper
  hosts: "{hosts}"
  root: "{root}"
  session_timeout_s: {session}
  instance_id: "${{DBLOG_INSTANCE:-cli}}"
engine:
  chunk_size: 50
  chunk_delay_s: {delay}
  flush_interval_s: 0.1
  heartbeat_interval_s: 1
initial_dumps:
  - tables: {tables}
"""


class Cluster:
    """Candidates ``n1``, ``n2``... of one pipeline, each a ``dblog run`` process."""

    def __init__(self, tmp: Path, dsn: str, hosts: str, tables: list[str], *,
                 session_s: float = 3.0, chunk_delay_s: float = 0.04) -> None:
        self.tmp, self.hosts = tmp, hosts
        self.out = tmp / "out.jsonl"
        self.config = tmp / "dblog.yaml"
        self.root = f"/ha-test-{uuid.uuid4().hex[:8]}"
        self.config.write_text(CONFIG.format(
            dsn=dsn, out=self.out, hosts=hosts, root=self.root, session=session_s,
            delay=chunk_delay_s, tables=json.dumps(tables)))
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.count = 0
        self.client = connect(hosts, 10.0)
        self.paths = ZkPaths.of(self.root, "ha")
        self.store = ZooKeeperStateStore(self.client, self.paths)

    def start(self) -> str:
        self.count += 1
        name = f"n{self.count}"
        with open(self.tmp / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "dblog", "run", "--config", str(self.config)],
                stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", "DBLOG_INSTANCE": name})
        return name

    def cli(self, *args: str) -> dict[str, Any]:
        done = subprocess.run([sys.executable, "-m", "dblog", *args, "--config",
                               str(self.config)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        result: dict[str, Any] = json.loads(done.stdout)
        return result

    def leader(self) -> str | None:
        info = read_leader(self.client, self.paths)
        return None if info is None else str(info["instance"])

    def wait_leader(self, other_than: str | None = None, timeout: float = 60) -> str:
        wait_until(lambda: self.leader() not in (None, other_than), timeout,
                   f"a leader other than {other_than}")
        leader = self.leader()
        assert leader is not None
        return leader

    def state(self) -> PipelineState | None:
        stored = self.store.load()
        return None if stored is None else state_from_json(stored.data)

    def dump(self, dump_id: str | None = None) -> tuple[int, str] | None:
        state = self.state()
        dumps = [] if state is None else [d for d in state.dumps.dumps if not d.internal
                                           and (dump_id is None or d.id == dump_id)]
        return (dumps[0].chunks, dumps[0].state.value) if dumps else None

    def wait_caught_up(self, dsn: str, timeout: float = 120) -> None:
        target = current_lsn(dsn)

        def caught_up() -> bool:
            state = self.state()
            return state is not None and isinstance(state.position, Lsn) and \
                state.position >= target

        wait_until(caught_up, timeout, "the capture to catch up")

    def logs(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}"
                         for p in sorted(self.tmp.glob("n*.log")))

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(15)
        deadline = time.monotonic() + 30
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self.client.stop()
        self.client.close()


def check_output(out: Path, dsn: str, tables: list[str]) -> list[dict[str, Any]]:
    """The jsonl output replays to the source, with I1 and I2 holding and seq gapless."""
    events = read_events(out)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), "seq must be gapless"
    check_commit_order(events)
    check_no_time_travel(events)
    assert replayed(events) == source_rows(dsn, tables)
    return events


def keys_read_twice(events: list[dict[str, Any]]) -> list[Any]:
    """Keys a dump read more than once (a dump restarted instead of resumed would)."""
    reads = Counter((e["dump_id"], e["table"], tuple(e["key"]))
                    for e in events if e["op"] == "read")
    return [k for k, n in reads.items() if n > 1]
