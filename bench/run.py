#!/usr/bin/env python
"""dblog throughput benchmark against PostgreSQL: dblog versus a bare psycopg baseline.

    python bench/run.py --db postgres --rows 1000000 [--chunk-size 1000] [--dsn DSN]

Prints ONE JSON line on stdout; progress goes to stderr. All numbers come from the same run,
on the same server, over the same table:

* dump:   a full dblog dump (Pipeline + PostgresConnector + JsonlOutput) of an N-row table,
          against keyset-chunked ``SELECT * ... WHERE id > %s ORDER BY id LIMIT %s`` in psycopg
          (autocommit, one transaction per chunk, tuples with the default loaders).
* stream: N single-row UPDATEs in transactions of 1,000, written while no consumer runs, then
          consumed by dblog (to a jsonl file) and by a bare wal2json replication consumer (same
          plugin options, same JSON decoder). Both slots are created together before the updates,
          so both consume exactly the same changes; only consumption is timed. A third slot is
          read by ``pg_recvlogical`` to /dev/null (``server_wal2json_events_per_s``): the
          server's own decoding rate, the ceiling of any consumer of the stream.

The dblog side runs in child processes (this script with the hidden ``--child`` flag), one per
phase, so its peak RSS is not polluted by the baseline. ``--profile DIR`` runs the dblog
engine thread under cProfile in the children and writes ``DIR/{dump,stream}.prof``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import select
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import child_result, count_ops, rss_kb, summary, wait_dump, wait_stream

TABLE_SCHEMA = "public"
TABLE_NAME = "dblog_bench"
TABLE = f"{TABLE_SCHEMA}.{TABLE_NAME}"
DUMP_SLOT = "dblog_bench_dump"
STREAM_SLOT = "dblog_bench_stream"
RAW_SLOT = "raw_slot"
RECV_SLOT = "dblog_bench_recvlogical"
RAW_RUNS = 4  # timed raw dumps, half before and half after the dblog dump
TX_SIZE = 1000

_T0 = time.monotonic()


def progress(message: str) -> None:
    print(f"[bench {time.monotonic() - _T0:7.1f}s] {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------
# server side set-up
# ----------------------------------------------------------------------------------------------

CREATE_SQL = f"""
CREATE TABLE {TABLE} (
    id bigint PRIMARY KEY,
    i1 int,
    i2 int,
    name varchar(32),
    amount numeric(12,2),
    note text,
    created_at timestamptz,
    updated_at timestamptz
) WITH (autovacuum_enabled = false)
"""

# ~100-byte notes, varied names and amounts, timestamps spread over a year
LOAD_SQL = f"""
INSERT INTO {TABLE}
SELECT g,
       (g * 7919) %% 1000003,
       g %% 1000,
       'customer-' || g,
       round(((g * 37) %% 10000000) / 100.0, 2),
       substr(repeat(md5(g::text), 4), 1, 100),
       timestamptz '2024-01-01 00:00:00+00' + (g %% 31536000) * interval '1 second',
       timestamptz '2024-06-01 00:00:00+00' + (g %% 8640000) * interval '1 second'
FROM generate_series(%s::bigint, %s::bigint) AS g
"""

# one statement per row, COMMIT every TX_SIZE rows (a DO block may commit when run in autocommit)
UPDATE_SQL = f"""
DO $$
BEGIN
  FOR k IN 1..{{rows}} LOOP
    UPDATE {TABLE} SET i1 = i1 + 1 WHERE id = k;
    IF k % {TX_SIZE} = 0 THEN
      COMMIT;
    END IF;
  END LOOP;
END
$$
"""


def load_table(conn: Any, rows: int) -> float:
    conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
    conn.execute(CREATE_SQL)
    started = time.monotonic()
    step = 1_000_000
    for low in range(1, rows + 1, step):
        conn.execute(LOAD_SQL, (low, min(rows, low + step - 1)))
    return time.monotonic() - started


def try_checkpoint(conn: Any) -> None:
    try:
        conn.execute("CHECKPOINT")
    except Exception as exc:  # needs superuser / pg_checkpoint on a shared server
        progress(f"CHECKPOINT skipped: {exc}")


def drop_slot(conn: Any, slot: str, wait_s: float = 30.0) -> None:
    """Drop a slot once its walsender (if any) has gone away."""
    deadline = time.monotonic() + wait_s
    while True:
        row = conn.execute("SELECT active FROM pg_replication_slots WHERE slot_name = %s",
                           (slot,)).fetchone()
        if row is None:
            return
        if not row[0] or time.monotonic() > deadline:
            try:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            except Exception as exc:
                progress(f"could not drop slot {slot}: {exc}")
            return
        time.sleep(0.1)


# ----------------------------------------------------------------------------------------------
# baselines (parent process)
# ----------------------------------------------------------------------------------------------


def raw_dump(dsn: str, chunk_size: int) -> tuple[int, float]:
    """Keyset-chunked SELECT *, tuples with the default loaders, one transaction per chunk."""
    import psycopg

    query = f"SELECT * FROM {TABLE} WHERE id > %s ORDER BY id LIMIT %s"
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.monotonic()
        last, total = 0, 0
        while True:
            rows = conn.execute(query, (last, chunk_size)).fetchall()
            total += len(rows)
            if len(rows) < chunk_size:
                break
            last = rows[-1][0]
        elapsed = time.monotonic() - started
    return total, elapsed


_XLOG_HEADER = struct.Struct(">QQQ")
_KEEPALIVE = struct.Struct(">QQB")
_STATUS = struct.Struct(">cQQQqB")
_PG_EPOCH_US = 946_684_800_000_000


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def raw_stream(dsn: str, slot: str, add_tables: str, expected_updates: int,
               timeout_s: float) -> tuple[int, float]:
    """A bare wal2json consumer: START_REPLICATION, get_copy_data, json-decode every message,
    count updates, answer keepalives. Returns (updates seen, seconds from connecting)."""
    from psycopg import pq

    from dblog.connectors.postgres.wal2json import WAL2JSON_OPTIONS

    # a generic parse (dicts and lists) with the JSON library and number handling dblog uses
    from dblog.connectors.postgres.wal2json import parse_message as decode
    options = {**WAL2JSON_OPTIONS, "add-tables": add_tables}
    opts = ", ".join(f"{_quote_ident(k)} '{v}'" for k, v in options.items())
    command = f"START_REPLICATION SLOT {_quote_ident(slot)} LOGICAL 0/0 ({opts})".encode()

    started = time.monotonic()
    conn = pq.PGconn.connect(f"{dsn} replication=database".encode())
    if conn.status != pq.ConnStatus.OK:
        raise RuntimeError(f"replication connect failed: {conn.get_error_message()!r}")
    try:
        conn.send_query(command)
        result = conn.get_result()
        if result is None or result.status != pq.ExecStatus.COPY_BOTH:
            raise RuntimeError(f"START_REPLICATION failed: {conn.get_error_message()!r}")
        updates, received = 0, 0
        deadline = started + timeout_s
        while updates < expected_updates:
            nbytes, data = conn.get_copy_data(1)
            if nbytes == 0:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"raw stream timed out after {updates} updates")
                select.select([conn.socket], [], [], 1.0)
                conn.consume_input()
                continue
            if nbytes < 0:
                raise RuntimeError(f"replication stream ended: {conn.get_error_message()!r}")
            kind = data[0]
            if kind == 0x77:  # 'w'
                start, _end, _ts = _XLOG_HEADER.unpack_from(data, 1)
                received = max(received, start)
                msg = decode(bytes(data[25:]))
                if msg["action"] == "U":
                    updates += 1
            elif kind == 0x6B:  # 'k'
                _end, _ts, reply = _KEEPALIVE.unpack_from(data, 1)
                if reply:
                    now = int(time.time() * 1_000_000) - _PG_EPOCH_US
                    conn.put_copy_data(_STATUS.pack(b"r", received, received, received, now, 0))
                    conn.flush()
        elapsed = time.monotonic() - started
    finally:
        conn.finish()
    return updates, elapsed


# ----------------------------------------------------------------------------------------------
# dblog side (child processes)
# ----------------------------------------------------------------------------------------------


def _pipeline(args: dict[str, Any], name: str, slot: str) -> Any:
    from dblog.app.pipeline import Pipeline
    from dblog.connectors.postgres import PostgresConnector
    from dblog.engine import EngineSettings
    from dblog.outputs.jsonl import JsonlOutput

    work = Path(args["workdir"])
    pipeline = Pipeline(
        PostgresConnector({"dsn": args["dsn"], "tables": [TABLE], "slot": slot}, name),
        [JsonlOutput({"path": str(work / f"{name}.jsonl")})],
        state_path=str(work / f"{name}-state.json"),
        settings=EngineSettings(chunk_size=args["chunk_size"]),
    )
    if args.get("profile"):
        import cProfile

        profiler = cProfile.Profile()
        inner = pipeline.run

        def profiled_run() -> None:  # the engine thread is the one worth profiling
            profiler.enable()
            try:
                inner()
            finally:
                profiler.disable()
                profiler.dump_stats(str(Path(args["profile"]) / f"{args['phase']}.prof"))

        pipeline.run = profiled_run  # type: ignore[method-assign]
    return pipeline


def child_dump(args: dict[str, Any]) -> dict[str, Any]:
    name = "bench_dump"
    baseline = rss_kb()
    pipeline = _pipeline(args, name, DUMP_SLOT)
    pipeline.start()
    try:
        started = time.monotonic()
        dump_id = pipeline.dump([TABLE])
        dump, done_at, flushed_at = wait_dump(pipeline, dump_id, started, args["timeout_s"])
        chunks = sum(t["chunks"] for t in dump["tables"])
        rows_status = sum(t["rows"] for t in dump["tables"])
    finally:
        pipeline.stop()
    rows = count_ops(Path(args["workdir"]) / f"{name}.jsonl", "read")
    mem = rss_kb()
    return {
        "rows": rows, "rows_in_status": rows_status, "chunks": chunks,
        "seconds": flushed_at - started, "seconds_to_done": done_at - started,
        "rss_baseline_mb": baseline.get("VmRSS", 0) / 1024, "peak_rss_mb": mem["VmHWM"] / 1024,
    }


def child_stream(args: dict[str, Any]) -> dict[str, Any]:
    name = "bench_stream"
    expected_seq = args["expected_seq"]
    baseline = rss_kb()
    pipeline = _pipeline(args, name, STREAM_SLOT)
    started = time.monotonic()
    pipeline.start()
    try:
        running_at = time.monotonic()
        status, emitted_at, committed_at = wait_stream(pipeline, expected_seq, started,
                                                       args["timeout_s"])
        position = status["committed_position"]
    finally:
        pipeline.stop()
    updates = count_ops(Path(args["workdir"]) / f"{name}.jsonl", "update")
    mem = rss_kb()
    return {
        "updates": updates, "committed_seq": status["committed_seq"],
        "committed_position": position, "seconds": committed_at - started,
        "seconds_to_emitted": emitted_at - started,
        "seconds_to_running": running_at - started,
        "rss_baseline_mb": baseline.get("VmRSS", 0) / 1024, "peak_rss_mb": mem["VmHWM"] / 1024,
    }


def child_main(phase: str, raw_args: str) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"[dblog {phase}] %(asctime)s %(name)s %(message)s")
    args = json.loads(raw_args)
    args["phase"] = phase
    result = child_dump(args) if phase == "dump" else child_stream(args)
    print(json.dumps(result), flush=True)


def run_child(phase: str, args: dict[str, Any]) -> dict[str, Any]:
    wrapper: list[str] = []
    if args.get("py_spy"):  # sample the child with py-spy (collapsed stacks, idle included)
        wrapper = ["py-spy", "record", "--idle", "--threads", "--rate", "250", "--format", "raw",
                   "-o", str(Path(args["py_spy"]) / f"{phase}.txt"), "--"]
    return child_result([*wrapper, sys.executable, os.path.abspath(__file__), "--child", phase,
                         "--child-args", json.dumps(args)], phase)


def server_ceiling(dsn: str, add_tables: str, end_lsn: str, rows: int,
                   timeout_s: float) -> float | None:
    """Update events/s of pg_recvlogical reading its slot with dblog's plugin options: the
    server's logical decoding alone (None without the tool)."""
    from pg_recvlogical import recvlogical_seconds

    from dblog.connectors.postgres.wal2json import WAL2JSON_OPTIONS

    progress(f"pg_recvlogical on {RECV_SLOT} (the server's own rate)")
    seconds = recvlogical_seconds(dsn, RECV_SLOT, {**WAL2JSON_OPTIONS, "add-tables": add_tables},
                                  end_lsn, timeout_s)
    if seconds is None:
        return None
    progress(f"pg_recvlogical: {rows} updates in {seconds:.2f}s = {rows / seconds:,.0f} ev/s")
    return round(rows / seconds, 1)


# ----------------------------------------------------------------------------------------------
# the benchmark
# ----------------------------------------------------------------------------------------------


BENCH_SLOTS = (DUMP_SLOT, STREAM_SLOT, f"{RAW_SLOT}_0", f"{RAW_SLOT}_1", RECV_SLOT)


def bench(dsn: str, rows: int, chunk_size: int, workdir: Path, timeout_s: float, *,
          profile: str | None = None, py_spy: str | None = None) -> dict[str, Any]:
    """Run both phases; on the way out (also on errors) drop what the benchmark created, so a
    server given with --dsn is left as it was (dblog's watermark table stays)."""
    import psycopg

    admin = psycopg.connect(dsn, autocommit=True)
    try:
        return _measure(admin, dsn, rows, chunk_size, workdir, timeout_s, profile, py_spy)
    finally:
        with contextlib.suppress(Exception):
            for slot in BENCH_SLOTS:
                drop_slot(admin, slot, wait_s=10.0)
            admin.execute(f"DROP TABLE IF EXISTS {TABLE}")
            admin.execute("DELETE FROM dblog.watermark "
                          "WHERE name IN ('bench_dump', 'bench_stream')")
        admin.close()


def _measure(admin: Any, dsn: str, rows: int, chunk_size: int, workdir: Path, timeout_s: float,
             profile: str | None, py_spy: str | None) -> dict[str, Any]:
    wall_started = time.monotonic()
    server_version = admin.execute("SHOW server_version").fetchone()[0]
    for slot in BENCH_SLOTS:
        drop_slot(admin, slot)

    progress(f"loading {rows} rows into {TABLE}")
    load_s = time.monotonic()
    insert_s = load_table(admin, rows)
    admin.execute(f"VACUUM ANALYZE {TABLE}")
    try_checkpoint(admin)
    load_s = time.monotonic() - load_s
    size = admin.execute(f"SELECT pg_total_relation_size('{TABLE}')").fetchone()[0]
    progress(f"loaded in {load_s:.1f}s ({insert_s:.1f}s INSERT), {size / 2**20:.0f} MiB")

    # -- dump: warm-up (untimed), raw x2, dblog, raw x2; the raw rate is the median run ------
    child_args = {"dsn": dsn, "chunk_size": chunk_size, "workdir": str(workdir),
                  "timeout_s": timeout_s, "profile": profile, "py_spy": py_spy}
    progress("raw dump: warm-up pass (untimed)")
    raw_dump(dsn, chunk_size)
    raw_runs: list[float] = []

    def timed_raw_dump() -> None:
        total, seconds = raw_dump(dsn, chunk_size)
        if total != rows:
            raise RuntimeError(f"raw dump read {total} rows, expected {rows}")
        raw_runs.append(total / seconds)
        progress(f"raw dump #{len(raw_runs)}: {total} rows in {seconds:.2f}s "
                 f"= {total / seconds:,.0f} rows/s")

    for _ in range(RAW_RUNS // 2):
        timed_raw_dump()
    progress("dblog dump (child process)")
    dump = run_child("dump", child_args)
    dump_rate = dump["rows"] / dump["seconds"]
    progress(f"dblog dump: {dump['rows']} rows in {dump['seconds']:.2f}s "
             f"= {dump_rate:,.0f} rows/s, peak RSS {dump['peak_rss_mb']:.0f} MB")
    if dump["rows"] != rows:
        raise RuntimeError(f"dblog dump wrote {dump['rows']} read events, expected {rows}")
    drop_slot(admin, DUMP_SLOT)
    for _ in range(RAW_RUNS - RAW_RUNS // 2):
        timed_raw_dump()

    # -- stream: all slots created together, updates with no consumer, then consume ------------
    # the raw consumer runs once before and once after dblog (own slot each); mean of the two
    progress("creating the dblog and raw slots, then running the updates")
    raw_slots = [f"{RAW_SLOT}_{i}" for i in range(2)]
    for slot in (STREAM_SLOT, *raw_slots, RECV_SLOT):
        admin.execute("SELECT pg_create_logical_replication_slot(%s, 'wal2json')", (slot,))
    update_s = time.monotonic()
    admin.execute(UPDATE_SQL.format(rows=rows))
    update_s = time.monotonic() - update_s
    end_lsn = admin.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]
    try_checkpoint(admin)
    transactions = -(-rows // TX_SIZE)
    progress(f"{rows} updates in {transactions} transactions took {update_s:.1f}s "
             f"(WAL insert position {end_lsn})")

    add_tables = ",".join([TABLE, "dblog.watermark"])  # as dblog: captured tables + watermarks
    raw_stream_runs: list[float] = []

    def timed_raw_stream(slot: str) -> None:
        progress(f"raw stream consumer on {slot}")
        updates, seconds = raw_stream(dsn, slot, add_tables, rows, timeout_s)
        raw_stream_runs.append(updates / seconds)
        progress(f"raw stream: {updates} updates in {seconds:.2f}s = {updates / seconds:,.0f} ev/s")
        drop_slot(admin, slot)

    timed_raw_stream(raw_slots[0])
    progress("dblog stream (child process)")
    # every update transaction is emitted as begin + its updates + commit
    stream = run_child("stream", {**child_args, "expected_seq": rows + 2 * transactions})
    stream_rate = stream["updates"] / stream["seconds"]
    progress(f"dblog stream: {stream['updates']} updates in {stream['seconds']:.2f}s "
             f"= {stream_rate:,.0f} ev/s, peak RSS {stream['peak_rss_mb']:.0f} MB")
    if stream["updates"] != rows:
        raise RuntimeError(f"dblog wrote {stream['updates']} update events, expected {rows}")
    drop_slot(admin, STREAM_SLOT)
    timed_raw_stream(raw_slots[1])
    ceiling = server_ceiling(dsn, add_tables, end_lsn, rows, timeout_s)
    drop_slot(admin, RECV_SLOT)
    result, rates = summary("postgres", rows, chunk_size, dump, raw_runs, stream,
                            raw_stream_runs)
    return {
        **result,
        "details": {
            "dump_seconds": round(dump["seconds"], 3),
            "dump_seconds_to_done": round(dump["seconds_to_done"], 3),
            "dump_chunks": dump["chunks"],
            "raw_dump_rows_per_s_runs": [round(r, 1) for r in raw_runs],
            "stream_seconds": round(stream["seconds"], 3),
            "stream_seconds_to_emitted": round(stream["seconds_to_emitted"], 3),
            "stream_seconds_to_running": round(stream["seconds_to_running"], 3),
            "stream_events_per_s_to_emitted": round(rows / stream["seconds_to_emitted"], 1),
            "raw_stream_events_per_s_runs": [round(r, 1) for r in raw_stream_runs],
            "server_wal2json_events_per_s": ceiling,
            # the machine's speed drifts between runs: the ratios against the fastest raw run
            # are the conservative reading
            "dump_ratio_vs_fastest_raw": round(rates["dump"] / max(raw_runs), 4),
            "stream_ratio_vs_fastest_raw": round(rates["stream"] / max(raw_stream_runs), 4),
            "update_transactions": transactions,
            "table_mib": round(size / 2**20, 1),
        },
        "server_version": server_version,
        "python_version": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "load_s": round(load_s, 2),
        "update_s": round(update_s, 2),
        "wall_s": round(time.monotonic() - wall_started, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["postgres", "mariadb"], default="postgres")
    parser.add_argument("--output", choices=["jsonl", "kafka", "sql", "delta", "spark-delta"],
                        default="jsonl",
                        help="kafka: dblog into a Kafka broker against a raw producer loop "
                             "(bench/kafka.py, which takes more options); sql, delta: into a "
                             "replica against raw upserts / write_deltalake (bench/replica.py); "
                             "spark-delta: through Spark into Delta against delta-spark "
                             "(bench/spark.py)")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chunk-size", type=int, default=1000)
    parser.add_argument("--dsn", help="use this server instead of a throwaway one")
    parser.add_argument("--pg-setting", action="append", default=[], metavar="NAME=VALUE",
                        help="extra setting for the throwaway server (repeatable), for example "
                             "synchronous_commit=on")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="give up on a phase after this many seconds")
    parser.add_argument("--profile", metavar="DIR",
                        help="cProfile the dblog engine thread, writing DIR/{dump,stream}.prof")
    parser.add_argument("--py-spy", metavar="DIR",
                        help="sample the dblog children with py-spy, writing DIR/{dump,stream}.txt")
    parser.add_argument("--child", choices=["dump", "stream"], help=argparse.SUPPRESS)
    parser.add_argument("--child-args", help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args(argv)
    if args.output == "kafka":  # the Kafka benchmark lives in bench/kafka.py
        return _delegate("kafka.py", argv)
    if args.output in ("sql", "delta"):  # the replica benchmark lives in bench/replica.py
        return _delegate("replica.py", argv)
    if args.output == "spark-delta":  # the Spark benchmark lives in bench/spark.py
        return _delegate("spark.py", argv)
    args = parser.parse_args(argv)
    if args.db == "mariadb":  # the MariaDB benchmark lives in bench/mysql.py
        return _mariadb_main(argv)
    if args.rows < 1 or args.chunk_size < 1:
        parser.error("--rows and --chunk-size must be at least 1")

    if args.child:
        child_main(args.child, args.child_args)
        return 0

    server = None
    workdir = Path(tempfile.mkdtemp(prefix="dblog-bench-"))
    try:
        if args.dsn:
            dsn = args.dsn
        else:
            from dblog.harness.postgres import start_postgres

            progress("starting a throwaway PostgreSQL server")
            extra = dict(item.split("=", 1) for item in args.pg_setting)
            server = start_postgres(extra or None)
            dsn = server.dsn()
        for option in ("profile", "py_spy"):
            if getattr(args, option):
                os.makedirs(getattr(args, option), exist_ok=True)
                setattr(args, option, os.path.abspath(getattr(args, option)))
        result = bench(dsn, args.rows, args.chunk_size, workdir, args.timeout,
                       profile=args.profile, py_spy=args.py_spy)
    finally:
        if server is not None:
            with contextlib.suppress(Exception):
                server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result), flush=True)
    return 0


def _mariadb_main(argv: list[str] | None) -> int:
    return _delegate("mysql.py", argv)


def _delegate(script: str, argv: list[str] | None) -> int:
    """Run ``main`` of another benchmark script of this folder with the same arguments."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        f"dblog_bench_{script[:-3]}", Path(__file__).with_name(script))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result: int = module.main(sys.argv[1:] if argv is None else argv)
    return result


if __name__ == "__main__":
    sys.exit(main())
