#!/usr/bin/env python
"""Peak memory of a dump against ``chunk_size`` (issue 16): a dblog dump of an N-row table
(pgbench_accounts-like rows, about 100 bytes each) into a jsonl file, once per chunk size, each
in a fresh child process so that one peak does not hide another.

    python bench/chunk_memory.py [--rows 500000] [--sizes 1000,1000000] [--dsn DSN]

Prints ONE JSON line on stdout: per chunk size the child's peak RSS (VmHWM), the dump time,
the rows, and the ratio of the largest chunk size's peak to the smallest's. Without ``--dsn`` a
throwaway server is started by the harness. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import rss_kb, wait_dump

TABLE = "public.mem_bench"


def progress(message: str) -> None:
    print(f"[chunk_memory] {message}", file=sys.stderr, flush=True)


def prepare(dsn: str, rows: int) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
        conn.execute(f"CREATE TABLE {TABLE} (aid int PRIMARY KEY, bid int NOT NULL, "
                     "abalance int NOT NULL, filler char(84))")
        conn.execute(f"INSERT INTO {TABLE} SELECT g, g / 100000 + 1, 0, '' "
                     "FROM generate_series(1, %s) g", (rows,))
        conn.execute(f"VACUUM ANALYZE {TABLE}")


def child(dsn: str, chunk_size: int, folder: Path) -> dict[str, Any]:
    """One dump at ``chunk_size`` in this process; its peak RSS and time."""
    from dblog.app.pipeline import Pipeline
    from dblog.connectors.postgres import PostgresConnector
    from dblog.engine import EngineSettings
    from dblog.outputs.jsonl import JsonlOutput

    slot = f"mem_{chunk_size}"
    source = PostgresConnector({"dsn": dsn, "slot": slot, "tables": [TABLE]}, slot)
    output = JsonlOutput({"path": str(folder / f"out-{chunk_size}.jsonl"), "fsync": False})
    settings = EngineSettings(chunk_size=chunk_size, flush_interval_s=0.5)
    pipeline = Pipeline(source, [output], state_path=str(folder / f"state-{chunk_size}.json"),
                        settings=settings).start()
    try:
        started = time.monotonic()
        dump, done_at, _ = wait_dump(pipeline, pipeline.dump([TABLE]), started, 1800)
    finally:
        pipeline.stop()
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    return {"chunk_size": chunk_size, "peak_rss_mb": round(rss_kb()["VmHWM"] / 1024, 1),
            "dump_s": round(done_at - started, 2),
            "rows": sum(t["rows"] for t in dump["tables"]),
            "chunks": sum(t["chunks"] for t in dump["tables"])}


def run_child(dsn: str, chunk_size: int, folder: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", "--dsn", dsn, "--chunk-size", str(chunk_size),
         "--folder", str(folder)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"child at chunk_size {chunk_size} failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(dsn: str, rows: int, sizes: list[int]) -> dict[str, Any]:
    prepare(dsn, rows)
    results = []
    with tempfile.TemporaryDirectory(prefix="dblog-chunkmem-") as tmp:
        for size in sizes:
            progress(f"dumping {rows} rows at chunk_size {size}")
            results.append(run_child(dsn, size, Path(tmp)))
            progress(json.dumps(results[-1]))
    smallest = min(results, key=lambda r: r["chunk_size"])
    largest = max(results, key=lambda r: r["chunk_size"])
    return {"rows": rows, "runs": results,
            "peak_ratio": round(largest["peak_rss_mb"] / smallest["peak_rss_mb"], 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--sizes", default="1000,1000000")
    parser.add_argument("--dsn")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--chunk-size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.dsn, args.chunk_size, Path(args.folder))))
        return 0
    server = None
    dsn = args.dsn
    if dsn is None:
        from dblog.harness.postgres import start_postgres

        server = start_postgres()
        dsn = server.dsn()
    try:
        print(json.dumps(measure(dsn, args.rows, [int(s) for s in args.sizes.split(",")])))
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
