#!/usr/bin/env python
"""Where the MariaDB stream's time goes: N updates (transactions of 1,000, or single-row
autocommit ones with ``--single``) written while no consumer runs, then consumed by a dblog
pipeline whose engine thread runs under cProfile.

    python bench/mysql_profile.py [--dsn mysql://root@127.0.0.1:3306/] [--rows 100000]
        [--single] [--out stream.prof] [--top 25]

Prints one JSON line (events/s, seconds) on stdout and the top functions by own time on
stderr. Without ``--dsn`` a throwaway MariaDB is started.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import wait_stream
from mysql import DATABASE, PROCEDURE_SQL, TX_SIZE, _connect, _sql, load_table
from mysql_child import TABLE, _pipeline, progress

SINGLE_SQL = f"""
CREATE PROCEDURE {DATABASE}.bench_single(n INT)
BEGIN
  DECLARE k INT DEFAULT 1;
  WHILE k <= n DO
    UPDATE {TABLE} SET i1 = i1 + 1 WHERE id = k;
    SET k = k + 1;
  END WHILE;
END
"""


def write_updates(dsn: str, rows: int, single: bool) -> str:
    """The GTID position before ``rows`` updates, which are then written."""
    admin = _connect(dsn)
    try:
        start = str(_sql(admin, "SELECT @@GLOBAL.gtid_binlog_pos")[0][0])
        name = "bench_single" if single else "bench_updates"
        _sql(admin, f"DROP PROCEDURE IF EXISTS {DATABASE}.{name}")
        _sql(admin, SINGLE_SQL if single else PROCEDURE_SQL)
        began = time.monotonic()
        _sql(admin, f"CALL {DATABASE}.{name}(%s)", (rows,))
        progress(f"{rows} updates in {time.monotonic() - began:.1f}s")
        return start
    finally:
        admin.close()


def profiled_stream(args: dict[str, Any], out: Path) -> dict[str, Any]:
    pipeline = _pipeline(args, "bench_profile", start=args["start"])
    profiler = cProfile.Profile()
    inner = pipeline.run

    def run() -> None:  # the engine thread is the one worth profiling
        profiler.enable()
        try:
            inner()
        finally:
            profiler.disable()
            profiler.dump_stats(str(out))

    pipeline.run = run  # type: ignore[method-assign]
    started = time.monotonic()
    pipeline.start()
    try:
        _, _, committed_at = wait_stream(pipeline, args["expected_seq"], started,
                                                  args["timeout_s"])
    finally:
        pipeline.stop()
    return {"events": args["rows"], "seconds": round(committed_at - started, 3),
            "events_per_s": round(args["rows"] / (committed_at - started), 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--single", action="store_true")
    parser.add_argument("--out", default="stream.prof")
    parser.add_argument("--top", type=int, default=25)
    options = parser.parse_args()
    server = None
    if not options.dsn:
        from dblog.harness.mariadb import start_mariadb

        server = start_mariadb()
        options.dsn = server.dsn()
    try:
        admin = _connect(options.dsn)
        load_table(admin, options.rows)
        admin.close()
        start = write_updates(options.dsn, options.rows, options.single)
        transactions = options.rows if options.single else -(-options.rows // TX_SIZE)
        args = {"dsn": options.dsn, "chunk_size": 1000, "server_id": 7301,
                "workdir": tempfile.mkdtemp(prefix="dblog-profile-"), "timeout_s": 900,
                "start": f"mariadb-gtid:{start}", "rows": options.rows,
                "expected_seq": options.rows + 2 * transactions}
        try:
            result = profiled_stream(args, Path(options.out))
        finally:
            shutil.rmtree(args["workdir"], ignore_errors=True)
    finally:
        if server is not None:
            server.stop()
    print(json.dumps(result), flush=True)
    stats = pstats.Stats(options.out, stream=sys.stderr)
    stats.sort_stats("tottime").print_stats(options.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
