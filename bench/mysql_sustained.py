#!/usr/bin/env python
"""dblog under a sustained write load on MariaDB: writers at a fixed rate of single-row
autocommit transactions while dblog streams and dumps a large table.

    python bench/mysql_sustained.py [--rate 5000] [--seconds 60] [--dump-rows 400000]
        [--writers 4] [--dsn mysql://root@127.0.0.1:3306/]

The writers (separate processes, each paced to its share of ``--rate``) update random rows of
the dumped table. A dump of the whole table is requested when the load starts. Every 0.1 s the
source's GTID sequence is sampled; dblog's lag at a moment is how long ago the source was at
the position dblog has committed then (committed: flushed by every output, every
``flush_interval_s``, 1 s by default, so the lag has a floor of up to that). Prints ONE JSON
line: the write rate reached, lag p50/p99/max over the load (and the largest lag after it,
while the dump finishes), and when the dump finished (seconds from its request). Without
``--dsn`` a throwaway MariaDB is started.
"""

from __future__ import annotations

import argparse
import bisect
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from mysql import TABLE, _connect, _sql, load_table
from mysql_child import _pipeline, progress


def writer(dsn: str, rate: float, seconds: float, rows: int, seed: int,
           done: Any) -> None:
    """Single-row autocommit UPDATEs at ``rate`` per second (catching up when behind)."""
    import random

    rng, conn = random.Random(seed), _connect(dsn)
    began, count = time.monotonic(), 0
    with conn.cursor() as cur:
        while (now := time.monotonic()) < began + seconds:
            due = int((now - began) * rate)
            if count >= due:
                time.sleep(min(0.002, (count + 1) / rate - (now - began)))
                continue
            cur.execute(f"UPDATE {TABLE} SET i1 = i1 + 1 WHERE id = %s",
                        (rng.randrange(1, rows + 1),))
            count += 1
    conn.close()
    with done.get_lock():
        done.value += count


def _seq(text: str | None) -> int:
    """The sequence number of domain 0 in a MariaDB GTID position text."""
    for part in (text or "").replace("mariadb-gtid:", "").split(","):
        fields = part.strip().split("-")
        if len(fields) == 3 and fields[0] == "0" and fields[2].isdigit():
            return int(fields[2])
    return 0


class LagSampler(threading.Thread):
    def __init__(self, dsn: str, pipeline: Any) -> None:
        super().__init__(daemon=True)
        self.conn, self.pipeline = _connect(dsn), pipeline
        self.source: list[tuple[int, float]] = []  # (seq, first time seen), seq increasing
        self.lags: list[tuple[float, float]] = []  # (when, lag)
        self.stop = threading.Event()

    def _source_time(self, seq: int) -> float | None:
        at = bisect.bisect_left(self.source, (seq, 0.0))
        return self.source[at][1] if at < len(self.source) else None

    def run(self) -> None:
        while not self.stop.wait(0.1):
            now = time.monotonic()
            seq = _seq(str(_sql(self.conn, "SELECT @@GLOBAL.gtid_binlog_pos")[0][0]))
            if not self.source or seq > self.source[-1][0]:
                self.source.append((seq, now))
            committed = _seq(self.pipeline.status()["committed_position"])
            seen = self._source_time(committed)
            self.lags.append((now, 0.0 if seen is None else now - seen))
        self.conn.close()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def run(dsn: str, rate: float, seconds: float, rows: int, writers: int) -> dict[str, Any]:
    admin = _connect(dsn)
    load_table(admin, rows)
    admin.close()
    work = Path(tempfile.mkdtemp(prefix="dblog-sustained-"))
    pipeline = _pipeline({"dsn": dsn, "chunk_size": 1000, "workdir": str(work),
                          "server_id": 7401}, "bench_sustained").start()
    sampler, done = LagSampler(dsn, pipeline), multiprocessing.Value("l", 0)
    procs = [multiprocessing.Process(target=writer, args=(dsn, rate / writers, seconds, rows,
                                                          seed, done)) for seed in range(writers)]
    try:
        sampler.start()
        began = time.monotonic()
        for proc in procs:
            proc.start()
        dump_id, dump_done = pipeline.dump([TABLE]), None
        while any(p.is_alive() for p in procs) or dump_done is None:
            status = pipeline.dump_status(dump_id) or {}
            if dump_done is None and status.get("state") == "done":
                dump_done = time.monotonic() - began
            if time.monotonic() - began > seconds + 600:
                break
            time.sleep(0.05)
        load_lags = [lag for when, lag in sampler.lags if when <= began + seconds]
        after_lags = [lag for when, lag in sampler.lags if when > began + seconds]
    finally:
        sampler.stop.set()
        for proc in procs:
            proc.join(30)
        pipeline.stop()
        shutil.rmtree(work, ignore_errors=True)
    return {"db": "mariadb", "mode": "sustained load", "target_tx_per_s": rate,
            "reached_tx_per_s": round(done.value / seconds, 1), "seconds": seconds,
            "dump_rows": rows, "dump_done_s": None if dump_done is None else round(dump_done, 2),
            "dump_done_during_load": dump_done is not None and dump_done <= seconds,
            "lag_p50_s": round(_percentile(load_lags, 0.5), 3),
            "lag_p99_s": round(_percentile(load_lags, 0.99), 3),
            "lag_max_s": round(max(load_lags, default=0.0), 3),
            "lag_mean_s": round(statistics.mean(load_lags), 3) if load_lags else None,
            "lag_max_after_load_s": round(max(after_lags, default=0.0), 3),
            "cpu_count": os.cpu_count(), "load_average": os.getloadavg()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=5000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--dump-rows", type=int, default=400_000)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--dsn")
    options = parser.parse_args()
    server = None
    if not options.dsn:
        from dblog.harness.mariadb import start_mariadb

        server = start_mariadb()
        options.dsn = server.dsn()
    try:
        result = run(options.dsn, options.rate, options.seconds, options.dump_rows,
                     options.writers)
        progress(f"lag p50 {result['lag_p50_s']}s p99 {result['lag_p99_s']}s")
    finally:
        if server is not None:
            server.stop()
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
