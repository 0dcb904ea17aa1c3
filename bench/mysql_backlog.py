#!/usr/bin/env python
"""Single-row autocommit transactions against MariaDB: how fast dblog drains a backlog of them,
beside the raw mysql-replication loop over the same binlog range in the same run.

    python bench/mysql_backlog.py [--rows 200000] [--dsn mysql://root@127.0.0.1:3306/]

Each transaction is one UPDATE of one row in autocommit (in the binlog: a GTID event, a table
map, one row event and an XID event), written while no consumer runs. Prints ONE JSON line:
dblog's transactions/s from its start to the last commit being committed in its state, and
the raw loops' rates (library defaults, and ``freeze_schema=True``). Without ``--dsn`` a
throwaway MariaDB is started.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mysql import _connect, load_table, raw_stream, run_child
from mysql_child import progress
from mysql_profile import write_updates


def measure(dsn: str, rows: int, workdir: Path, timeout_s: float) -> dict[str, Any]:
    admin = _connect(dsn)
    try:
        load_s = load_table(admin, rows)
    finally:
        admin.close()
    began = time.monotonic()
    start = write_updates(dsn, rows, single=True)
    write_s = time.monotonic() - began
    raw: dict[str, float] = {}
    for freeze in (False, True):
        count, seconds = raw_stream(dsn, start, rows, freeze, timeout_s)
        raw[f"freeze_schema={freeze}"] = count / seconds
        progress(f"raw loop (freeze_schema={freeze}): {count / seconds:,.0f} tx/s")
    child = {"dsn": dsn, "chunk_size": 1000, "workdir": str(workdir), "timeout_s": timeout_s,
             "server_id": 7201, "start": f"mariadb-gtid:{start}", "expected_seq": 3 * rows}
    stream = run_child("stream", child)
    dblog = stream["updates"] / stream["seconds"]
    progress(f"dblog: {dblog:,.0f} tx/s")
    if stream["updates"] != rows:
        raise RuntimeError(f"dblog wrote {stream['updates']} update events, expected {rows}")
    return {"db": "mariadb", "mode": "single-row autocommit backlog", "transactions": rows,
            "dblog_transactions_per_s": round(dblog, 1),
            "raw_transactions_per_s": {k: round(v, 1) for k, v in raw.items()},
            "ratio_vs_raw": round(dblog / raw["freeze_schema=False"], 3),
            "ratio_vs_frozen_raw": round(dblog / raw["freeze_schema=True"], 3),
            "dblog_seconds": round(stream["seconds"], 2),
            "dblog_peak_rss_mb": round(stream["peak_rss_mb"], 1),
            "load_s": round(load_s, 2), "write_s": round(write_s, 2),
            "python_version": platform.python_version(), "cpu_count": os.cpu_count(),
            "load_average": os.getloadavg()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--dsn")
    parser.add_argument("--timeout", type=float, default=1800.0)
    options = parser.parse_args()
    server = None
    if not options.dsn:
        from dblog.harness.mariadb import start_mariadb

        server = start_mariadb()
        options.dsn = server.dsn()
    workdir = Path(tempfile.mkdtemp(prefix="dblog-bl-"))
    try:
        result = measure(options.dsn, options.rows, workdir, options.timeout)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
