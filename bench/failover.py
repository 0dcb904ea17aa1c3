#!/usr/bin/env python
"""dblog failover benchmark: a leader and a standby (``dblog run`` processes sharing ZooKeeper and
one jsonl output) under a steady write load; the leader is killed with SIGKILL.

    python bench/failover.py [--session-timeout 5] [--rate 200] [--before 4] [--after 4]

Starts its own throwaway PostgreSQL and ZooKeeper. Prints ONE JSON line on stdout; progress goes
to stderr:

* ``takeover_s``: from the SIGKILL to the first event the new leader wrote to the output (the
  output file is polled every 5 ms: the first change after the kill that leaves it longer than the
  committed prefix).
* ``elected_s``: from the SIGKILL to the new leader's znode.
* ``events_lost``: writer transactions (one change each) committed in the source whose txid is
  missing from the output, plus rows where replaying the output differs from the source.
* ``duplicate_events``: change events (same op, position, table, key) written more than once.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import psycopg

from dblog.connectors.postgres.positions import Lsn
from dblog.ha.election import read_leader
from dblog.ha.zk import ZkPaths, ZooKeeperStateStore, connect
from dblog.harness.postgres import start_postgres
from dblog.harness.zookeeper import start_zookeeper
from dblog.state import state_from_json
from dblog.testing import replay

_T0 = time.monotonic()
ROWS = 2000
CONFIG = """
name: failover
source: {{type: postgres, dsn: "{dsn}", slot: failover, tables: ["public.ha_bench"]}}
outputs: [{{type: jsonl, path: "{out}"}}]
state: {{type: zookeeper, hosts: "{hosts}", session_timeout_s: {session},
         instance_id: "${{DBLOG_INSTANCE}}"}}
engine: {{chunk_size: 500, flush_interval_s: 0.2, heartbeat_interval_s: 1}}
initial_dumps: [{{tables: ["public.ha_bench"]}}]
log_level: WARNING
"""


def progress(message: str) -> None:
    print(f"[failover {time.monotonic() - _T0:6.1f}s] {message}", file=sys.stderr, flush=True)


def wait_until(predicate: Any, timeout: float, what: str, every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


class Writer(threading.Thread):
    """One single-statement transaction at a time at ``rate`` per second; records txids."""

    def __init__(self, dsn: str, rate: float) -> None:
        super().__init__(daemon=True)
        self.dsn, self.rate = dsn, rate
        self.txids: list[int] = []
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        rng = random.Random(5)
        try:
            with psycopg.connect(self.dsn) as conn:
                while not self.stop_event.wait(1.0 / self.rate):
                    k = rng.randrange(1, ROWS * 2)
                    with conn.transaction():
                        conn.execute(
                            "INSERT INTO ha_bench VALUES (%s, nextval('ver'), md5(random()::text))"
                            " ON CONFLICT (id) DO UPDATE SET ver = excluded.ver, v = excluded.v",
                            (k,))
                        row = conn.execute("SELECT txid_current() % 4294967296").fetchone()
                    assert row is not None
                    self.txids.append(int(row[0]))
        except BaseException as exc:  # reported in the result
            self.error = exc


class Bench:
    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args, self.root = args, root
        self.pg = start_postgres()
        self.zk = start_zookeeper()
        self.dsn = self.pg.dsn()
        self.out = root / "out.jsonl"
        self.config = root / "failover.yaml"
        self.config.write_text(CONFIG.format(dsn=self.dsn, out=self.out, hosts=self.zk.hosts,
                                             session=args.session_timeout))
        self.client = connect(self.zk.hosts, 10.0)
        self.paths = ZkPaths.of("/dblog", "failover")
        self.store = ZooKeeperStateStore(self.client, self.paths)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        self.client.stop()
        self.client.close()
        self.zk.stop()
        self.pg.stop()

    def start(self, name: str) -> None:
        with open(self.root / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "dblog", "run", "--config", str(self.config)],
                stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", "DBLOG_INSTANCE": name})

    def leader(self) -> str | None:
        info = read_leader(self.client, self.paths)
        return None if info is None else str(info["instance"])

    def state(self) -> Any:
        stored = self.store.load()
        return None if stored is None else state_from_json(stored.data)

    def dump_done(self) -> bool:
        state = self.state()
        return state is not None and any(d.state.value == "done" for d in state.dumps.dumps)


def committed_prefix(path: Path, seq: int) -> int:
    """Bytes of ``path`` up to and including the line with sequence number ``seq``."""
    size = 0
    with open(path, "rb") as handle:
        for line in handle:
            if orjson.loads(line)["seq"] > seq:
                break
            size += len(line)
    return size


def watch_takeover(path: Path, prefix: int, killed_ns: int, timeout: float) -> float:
    """Monotonic time of the first change after the kill leaving ``path`` beyond ``prefix``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stat = path.stat()
        if stat.st_mtime_ns > killed_ns and stat.st_size > prefix:
            return time.monotonic()
        time.sleep(0.005)
    raise RuntimeError("the new leader wrote nothing")


def start_pair(bench: Bench) -> None:
    """The table, leader a (which dumps it first) and standby b."""
    with psycopg.connect(bench.dsn, autocommit=True) as conn:
        conn.execute("CREATE SEQUENCE ver; CREATE TABLE ha_bench (id int PRIMARY KEY, "
                     "ver bigint NOT NULL, v text)")
        conn.execute(f"INSERT INTO ha_bench SELECT g, nextval('ver'), 'init' "
                     f"FROM generate_series(1, {ROWS}) g")
    bench.start("a")
    wait_until(lambda: bench.leader() == "a", 60, "a to lead")
    bench.start("b")
    wait_until(bench.dump_done, 120, "the initial dump")


def measure(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    start_pair(bench)
    writer = Writer(bench.dsn, args.rate)
    writer.start()
    time.sleep(args.before)
    progress(f"killing leader a after {len(writer.txids)} writer transactions")
    killed_ns, killed = time.time_ns(), time.monotonic()
    bench.procs["a"].send_signal(signal.SIGKILL)
    bench.procs["a"].wait(10)
    prefix = committed_prefix(bench.out, bench.state().seq)
    wait_until(lambda: bench.leader() == "b", 60, "b to lead", every=0.005)
    elected = time.monotonic()
    first_event = watch_takeover(bench.out, prefix, killed_ns, 60)
    progress(f"b elected after {elected - killed:.2f}s, first event at {first_event - killed:.2f}s")
    time.sleep(args.after)
    writer.stop_event.set()
    writer.join(30)
    row = psycopg.connect(bench.dsn, autocommit=True).execute(
        "SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    target = Lsn.parse(row[0])
    wait_until(lambda: (s := bench.state()) is not None and s.position >= target, 120, "catch-up")
    bench.procs["b"].send_signal(signal.SIGTERM)
    bench.procs["b"].wait(30)
    lost, mismatches, duplicates, events = check(bench, writer.txids)
    return {
        "bench": "failover", "session_timeout_s": args.session_timeout,
        "takeover_s": round(first_event - killed, 3), "elected_s": round(elected - killed, 3),
        "events_lost": lost + mismatches, "transactions_missing": lost,
        "replay_mismatches": mismatches, "duplicate_events": duplicates,
        "writer_transactions": len(writer.txids), "write_rate_per_s": args.rate,
        "output_events": events, "writer_error": None if writer.error is None
        else repr(writer.error),
        "target_takeover_s": args.session_timeout + 5,
        "target_met": first_event - killed <= args.session_timeout + 5 and lost + mismatches == 0,
    }


def check(bench: Bench, txids: list[int]) -> tuple[int, int, int, int]:
    with open(bench.out, "rb") as handle:
        events = [orjson.loads(line) for line in handle]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), "seq not gapless"
    seen = {e["txid"] for e in events if e["op"] == "commit"}
    lost = sum(1 for t in txids if t not in seen)
    with psycopg.connect(bench.dsn) as conn:
        rows = conn.execute("SELECT id, ver, v FROM ha_bench").fetchall()
    source = {(("public", "ha_bench"), (i,)): {"id": i, "ver": ver, "v": v} for i, ver, v in rows}
    replayed = {(t, tuple(k)): r for (t, k), r in replay(events).items()}
    mismatches = sum(1 for k in source.keys() | replayed.keys()
                     if source.get(k) != replayed.get(k))
    changes = Counter((e["op"], e.get("pos"), e["table"], tuple(e["key"])) for e in events
                      if e["op"] in ("insert", "update", "delete"))
    return lost, mismatches, sum(n - 1 for n in changes.values()), len(events)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--session-timeout", type=float, default=5.0)
    parser.add_argument("--rate", type=float, default=200.0, help="writer transactions per s")
    parser.add_argument("--before", type=float, default=4.0, help="seconds of load before kill")
    parser.add_argument("--after", type=float, default=4.0, help="seconds of load after it")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs, output)")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="dblog-failover-"))
    progress(f"servers starting; work dir {root}")
    bench = Bench(args, root)
    try:
        result = measure(bench, args)
    finally:
        bench.close()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
