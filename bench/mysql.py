#!/usr/bin/env python
"""dblog throughput benchmark against MariaDB: dblog versus bare driver/library baselines.

    python bench/run.py --db mariadb --rows 200000 [--chunk-size 1000] [--dsn mysql://...]

(``bench/run.py`` dispatches here.) Prints ONE JSON line on stdout with the same keys as the
PostgreSQL mode; progress goes to stderr. All numbers come from the same run, on the same server,
over the same table:

* dump:   a full dblog dump (Pipeline + MysqlConnector + JsonlOutput) of an N-row table, against
          keyset-chunked ``SELECT * ... WHERE id > %s ORDER BY id LIMIT %s`` through the SELECT
          driver dblog uses (mysqlclient when installed: its C extension is the fastest here),
          autocommit, tuples with the default converters.
* stream: N single-row UPDATEs in transactions of 1,000 (a stored procedure), written before
          any consumer runs, then consumed by dblog (to a jsonl file, resuming from the GTID
          position taken before the updates) and by a bare ``BinLogStreamReader`` loop over the
          same GTID range that only iterates the rows of each update event (library defaults).
          The same loop with ``freeze_schema=True`` (table maps parsed once per table id, as
          dblog's reader does) is reported in ``details`` too.

The dblog side runs in child processes (this script with ``--child``), so its peak RSS is its own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import summary
from mysql_child import TABLE as CHILD_TABLE
from mysql_child import child_dump, child_stream, progress

DATABASE = "dblog_bench"
TABLE_NAME = "dblog_bench"
TABLE = f"{DATABASE}.{TABLE_NAME}"
assert TABLE == CHILD_TABLE
RAW_RUNS = 4
TX_SIZE = 1000

CREATE_SQL = f"""
CREATE TABLE {TABLE} (
    id bigint PRIMARY KEY, i1 int, i2 int, name varchar(32), amount decimal(12,2), note text,
    created_at timestamp(6) NULL, updated_at timestamp(6) NULL
) ENGINE=InnoDB
"""
LOAD_SQL = f"""
INSERT INTO {TABLE}
SELECT seq, (seq * 7919) % 1000003, seq % 1000, concat('customer-', seq),
       round(((seq * 37) % 10000000) / 100.0, 2), left(repeat(md5(seq), 4), 100),
       timestamp'2024-01-01 00:00:00' + interval (seq % 31536000) second,
       timestamp'2024-06-01 00:00:00' + interval (seq % 8640000) second
FROM {DATABASE}.seq_{{low}}_to_{{high}}
"""
PROCEDURE_SQL = f"""
CREATE PROCEDURE {DATABASE}.bench_updates(n INT)
BEGIN
  DECLARE k INT DEFAULT 1;
  START TRANSACTION;
  WHILE k <= n DO
    UPDATE {TABLE} SET i1 = i1 + 1 WHERE id = k;
    IF k % {TX_SIZE} = 0 THEN COMMIT; START TRANSACTION; END IF;
    SET k = k + 1;
  END WHILE;
  COMMIT;
END
"""


def _connect(dsn: str) -> Any:
    from dblog.connectors.mysql.db import connect, parse_dsn

    return connect(parse_dsn(dsn))


def _sql(conn: Any, sql: str, params: Any = None) -> list[Any]:
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return list(cur.fetchall() or [])


def load_table(conn: Any, rows: int) -> float:
    started = time.monotonic()
    _sql(conn, f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
    _sql(conn, f"DROP TABLE IF EXISTS {TABLE}")
    _sql(conn, CREATE_SQL)
    step = 100_000
    for low in range(1, rows + 1, step):
        _sql(conn, LOAD_SQL.format(low=low, high=min(rows, low + step - 1)))
    _sql(conn, f"ANALYZE TABLE {TABLE}")
    return time.monotonic() - started


def raw_dump(dsn: str, chunk_size: int) -> tuple[int, float]:
    """Keyset chunks through the SELECT driver, one autocommit statement each."""
    conn = _connect(dsn)
    try:
        started, total, last = time.monotonic(), 0, 0
        with conn.cursor() as cur:
            while True:
                cur.execute(f"SELECT * FROM {TABLE} WHERE id > %s ORDER BY id LIMIT %s",
                            (last, chunk_size))
                rows = cur.fetchall()
                if not rows:
                    break
                total += len(rows)
                last = rows[-1][0]
        return total, time.monotonic() - started
    finally:
        conn.close()


def raw_stream(dsn: str, start_gtid: str, expected: int, freeze: bool,
               timeout_s: float) -> tuple[int, float]:
    """A bare BinLogStreamReader from ``start_gtid`` iterating the rows of the update events."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import UpdateRowsEvent

    from dblog.connectors.mysql.db import parse_dsn

    stream = BinLogStreamReader(parse_dsn(dsn).replication_settings(), server_id=7001 + freeze,
                                blocking=True, is_mariadb=True, auto_position=start_gtid,
                                only_events=[UpdateRowsEvent], only_schemas=[DATABASE],
                                freeze_schema=freeze, enable_logging=False)
    started, updates = time.monotonic(), 0
    try:
        for event in stream:
            for _row in event.rows:
                updates += 1
            if updates >= expected:
                break
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"raw stream saw {updates} of {expected} updates")
        return updates, time.monotonic() - started
    finally:
        stream.close()


def run_child(phase: str, args: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", phase,
                           "--child-args", json.dumps(args)],
                          stdout=subprocess.PIPE, stderr=None, text=True, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"dblog {phase} child failed ({proc.returncode}): {proc.stdout[-500:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _timed_raw_dump(dsn: str, rows: int, chunk_size: int, runs: list[float]) -> None:
    total, seconds = raw_dump(dsn, chunk_size)
    if total != rows:
        raise RuntimeError(f"raw dump read {total} rows, expected {rows}")
    runs.append(total / seconds)
    progress(f"raw dump #{len(runs)}: {total / seconds:,.0f} rows/s")


def _measure_dump(dsn: str, rows: int, chunk_size: int, child_args: dict[str, Any]
                  ) -> tuple[dict[str, Any], list[float]]:
    """Warm-up (untimed), two raw runs, dblog, two raw runs; the raw rate is the median."""
    raw_dump(dsn, chunk_size)
    raw_runs: list[float] = []
    for _ in range(RAW_RUNS // 2):
        _timed_raw_dump(dsn, rows, chunk_size, raw_runs)
    dump = run_child("dump", child_args)
    progress(f"dblog dump: {dump['rows'] / dump['seconds']:,.0f} rows/s")
    if dump["rows"] != rows:
        raise RuntimeError(f"dblog dump wrote {dump['rows']} read events, expected {rows}")
    for _ in range(RAW_RUNS - RAW_RUNS // 2):
        _timed_raw_dump(dsn, rows, chunk_size, raw_runs)
    return dump, raw_runs


def _measure_stream(admin: Any, dsn: str, rows: int, child_args: dict[str, Any],
                    timeout_s: float) -> tuple[dict[str, Any], list[float], float, float]:
    start = str(_sql(admin, "SELECT @@GLOBAL.gtid_binlog_pos")[0][0])
    _sql(admin, f"DROP PROCEDURE IF EXISTS {DATABASE}.bench_updates")
    _sql(admin, PROCEDURE_SQL)
    update_s = time.monotonic()
    _sql(admin, f"CALL {DATABASE}.bench_updates(%s)", (rows,))
    update_s = time.monotonic() - update_s
    progress(f"{rows} updates took {update_s:.1f}s (from GTID {start!r})")
    raw_runs: list[float] = []

    def timed_raw(freeze: bool) -> float:
        updates, seconds = raw_stream(dsn, start, rows, freeze, timeout_s)
        progress(f"raw stream (freeze_schema={freeze}): {updates / seconds:,.0f} ev/s")
        return updates / seconds

    raw_runs.append(timed_raw(False))
    frozen = timed_raw(True)
    progress("dblog stream (child process)")
    transactions = -(-rows // TX_SIZE)
    stream = run_child("stream", {**child_args, "start": f"mariadb-gtid:{start}",
                                  "expected_seq": rows + 2 * transactions})
    progress(f"dblog stream: {stream['updates'] / stream['seconds']:,.0f} ev/s")
    if stream["updates"] != rows:
        raise RuntimeError(f"dblog wrote {stream['updates']} update events, expected {rows}")
    raw_runs.append(timed_raw(False))
    return stream, raw_runs, frozen, update_s


def bench(dsn: str, rows: int, chunk_size: int, workdir: Path, timeout_s: float) -> dict[str, Any]:
    wall = time.monotonic()
    admin = _connect(dsn)
    try:
        version = str(_sql(admin, "SELECT VERSION()")[0][0])
        progress(f"loading {rows} rows into {TABLE}")
        load_s = load_table(admin, rows)
        child_args = {"dsn": dsn, "chunk_size": chunk_size, "workdir": str(workdir),
                      "timeout_s": timeout_s, "server_id": 7100}
        dump, raw_dump_runs = _measure_dump(dsn, rows, chunk_size, child_args)
        stream, raw_stream_runs, frozen, update_s = _measure_stream(
            admin, dsn, rows, {**child_args, "server_id": 7101}, timeout_s)
    finally:
        with contextlib.suppress(Exception):
            _sql(admin, f"DROP DATABASE IF EXISTS {DATABASE}")
            _sql(admin, "DELETE FROM dblog.watermark WHERE name IN ('bench_dump', "
                 "'bench_stream')")
        admin.close()
    return _result(rows, chunk_size, dump, raw_dump_runs, stream, raw_stream_runs, frozen,
                   {"server_version": version, "load_s": round(load_s, 2),
                    "update_s": round(update_s, 2), "wall_s": round(time.monotonic() - wall, 2)})


def _result(rows: int, chunk_size: int, dump: dict[str, Any], raw_dump_runs: list[float],
            stream: dict[str, Any], raw_stream_runs: list[float], frozen: float,
            extra: dict[str, Any]) -> dict[str, Any]:
    from dblog.connectors.mysql.db import DRIVER

    result, rates = summary("mariadb", rows, chunk_size, dump, raw_dump_runs, stream,
                            raw_stream_runs)
    # issue 15: stream >= 40,000 events/s and >= 3x the raw row loop, dump ratio >= 0.5
    goals = {"stream_events_per_s": 40_000.0, "stream_ratio": 3.0, "dump_ratio": 0.5}
    return {
        **result,
        "issue15_targets": goals,
        "issue15_targets_met": {k: result[k] >= v for k, v in goals.items()},
        "details": {
            "select_driver": DRIVER,
            "dump_seconds": round(dump["seconds"], 3),
            "dump_seconds_to_done": round(dump["seconds_to_done"], 3),
            "dump_chunks": dump["chunks"],
            "raw_dump_rows_per_s_runs": [round(r, 1) for r in raw_dump_runs],
            "stream_seconds": round(stream["seconds"], 3),
            "stream_seconds_to_emitted": round(stream["seconds_to_emitted"], 3),
            "raw_stream_events_per_s_runs": [round(r, 1) for r in raw_stream_runs],
            "raw_stream_frozen_schema_events_per_s": round(frozen, 1),
            "stream_ratio_vs_frozen_schema_raw": round(rates["stream"] / frozen, 4),
            "update_transactions": -(-rows // TX_SIZE),
        },
        **extra,
        "python_version": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["mariadb"], default="mariadb")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--chunk-size", type=int, default=1000)
    parser.add_argument("--dsn", help="mysql://user:password@host:port/ instead of a throwaway "
                                      "MariaDB")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--child", choices=["dump", "stream"], help=argparse.SUPPRESS)
    parser.add_argument("--child-args", help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args(argv)
    if args.child:
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
        child = json.loads(args.child_args)
        result = child_dump(child) if args.child == "dump" else child_stream(child)
        print(json.dumps(result), flush=True)
        return 0
    server = None
    workdir = Path(tempfile.mkdtemp(prefix="dblog-bench-"))
    try:
        dsn = args.dsn
        if not dsn:
            from dblog.harness.mariadb import start_mariadb

            progress("starting a throwaway MariaDB server")
            server = start_mariadb()
            dsn = server.dsn()
        result = bench(dsn, args.rows, args.chunk_size, workdir, args.timeout)
    finally:
        if server is not None:
            server.stop()
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
