#!/usr/bin/env python
"""Spark output benchmark: dblog from PostgreSQL into Delta through Spark (the ``spark`` output
with a ``delta`` sink), beside delta-spark writing the same Arrow data in the same session.

    python bench/run.py --db postgres --output spark-delta [--rows 1000000] [--updates 100000]
        [--master local[2]] [--dsn DSN]

(``bench/run.py`` delegates here.) Prints ONE JSON line on stdout, progress on stderr. A child
process (this script with ``--child``) holds the Spark session and runs, in order:

* session: the Spark session's start time (the JVM with the connector jars, both compilers);
* dump: a dblog dump of the N-row table of bench/run.py (rows/s until everything is
  committed), with each flush's wall time (median, p99) and the process's RSS sampled at a
  quarter, half, three quarters and all of the rows (flat in N: the rows are not kept);
* stream: U single-row UPDATEs (transactions of 1,000) written while dblog is stopped, then
  consumed (events/s until committed);
* raw: the same rows as Arrow tables of the replica's schema, in batches of dblog's mean
  flush size, written by delta-spark from the same session: appended (``raw``) and MERGEd with
  the same guarded statement (``raw_merge``), the dump rows into an empty table and the updated
  rows into a full one.

The peak RSS of the dblog process is read before the raw phase (which holds every row).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import on_postgres, rss_kb
from replica import (
    clean_source,
    delta_tables,
    load_source,
    source_args,
    source_rows,
    timed_dump,
    timed_stream,
)
from run import TABLE, progress

SLOT = "bench_rep"  # replica.dblog_stream resumes on this slot


def session_config(master: str, path: str, commit_interval_s: float,
                   commit_idle_s: float | None = None) -> dict[str, Any]:
    return {"type": "spark", "master": master, "app_name": "dblog-bench",
            "commit_interval_s": commit_interval_s, "commit_idle_s": commit_idle_s,
            "conf": {"spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "2",
                     "spark.ui.enabled": "false"},
            "sinks": [{"type": "delta", "path": path}]}


class RssSampler:
    """The process's RSS (MB) each time the committed row count passes a quarter."""

    def __init__(self, pipeline: Any, rows: int) -> None:
        self.pipeline, self.rows = pipeline, rows
        self.samples: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        marks = [0.25, 0.5, 0.75, 1.0]
        while marks and not self._stop.wait(0.5):
            committed = self.pipeline.status()["committed_seq"]
            while marks and committed >= marks[0] * self.rows:
                self.samples[f"{int(marks.pop(0) * 100)}%"] = round(rss_kb()["VmRSS"] / 1024, 1)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        self.samples["end"] = round(rss_kb()["VmRSS"] / 1024, 1)
        return self.samples


def _pipeline(dsn: str, output: Any, workdir: Path, settings: Any) -> Any:
    from dblog.app.pipeline import Pipeline
    from dblog.connectors.postgres import PostgresConnector

    return Pipeline(PostgresConnector({"dsn": dsn, "tables": [TABLE], "slot": SLOT}, SLOT),
                    [output], state_path=str(workdir / "state.json"), settings=settings)


def dblog_dump(dsn: str, output: Any, workdir: Path, settings: Any,
               rows: int) -> dict[str, Any]:
    pipeline = _pipeline(dsn, output, workdir, settings)
    pipeline.start(wait_ready=600)
    sampler = RssSampler(pipeline, rows)
    try:
        done, seconds = timed_dump(pipeline, 7200)
    finally:
        samples = sampler.stop()
        pipeline.stop(600)
    return {"rows": done, "seconds": seconds, "rss_mb": samples}


def dblog_stream(dsn: str, output: Any, workdir: Path, settings: Any,
                 updates: int) -> dict[str, Any]:
    """Write the updates while dblog is stopped, then time their consumption."""
    return timed_stream(dsn, updates, lambda: _pipeline(dsn, output, workdir, settings),
                        wait_s=600)


def latency(seconds: list[float]) -> dict[str, float]:
    if not seconds:
        return {}
    ordered = sorted(seconds)
    return {"flushes": len(ordered), "median_s": round(statistics.median(ordered), 3),
            "p99_s": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 3),
            "max_s": round(ordered[-1], 3)}


def raw_writes(spark: Any, workdir: Path, rows: list[dict[str, Any]],
               updated: list[dict[str, Any]], kinds: dict[str, Any],
               batch: int) -> dict[str, float]:
    """delta-spark appends and guarded MERGEs of the same Arrow data; rows/s of each."""
    from dblog.outputs import delta_table as dtab
    from dblog.outputs.spark_session import arrow_frame

    out = {}
    for name, data, major in (("dump", rows, 1), ("stream", updated, 2)):
        tables = delta_tables(data, kinds, batch, major)
        path = str(workdir / f"raw_append_{name}")
        started = time.monotonic()
        for table in tables:
            arrow_frame(spark, table).write.format("delta").mode("append").save(path)
        out[f"raw_{name}"] = len(data) / (time.monotonic() - started)
        target = str(workdir / "raw_merge")  # the stream's MERGEs meet the dumped rows
        if name == "dump":
            arrow_frame(spark, tables[0].slice(0, 0)).write.format("delta").save(target)
        started = time.monotonic()
        for table in tables:
            arrow_frame(spark, table).createOrReplaceTempView("raw_src")
            predicate = dtab.merge_predicate(kinds, ("id",), table)
            spark.sql(f"MERGE INTO delta.`{target}` t USING raw_src s ON {predicate} "
                      f"WHEN MATCHED AND ({dtab.NEWER}) THEN UPDATE SET * "
                      "WHEN NOT MATCHED THEN INSERT *").collect()
        out[f"raw_merge_{name}"] = len(data) / (time.monotonic() - started)
        progress(f"raw {name}: {out}")
    return out


def child(args: argparse.Namespace) -> dict[str, Any]:
    from dblog.connectors.postgres.chunks import PostgresChunkReader
    from dblog.core.model import TableId
    from dblog.engine import EngineSettings
    from dblog.outputs.spark import SparkOutput
    from dblog.outputs.spark_config import SparkConfig
    from dblog.outputs.spark_session import start_session
    from dblog.outputs.sql_kinds import kinds_of

    workdir = Path(args.workdir)
    config = SparkConfig(**session_config(args.master, str(workdir / "delta"),
                                          args.commit_interval, args.commit_idle))
    started = time.monotonic()
    spark, _ = start_session(config, kafka=False)
    session_s = time.monotonic() - started
    progress(f"Spark session started in {session_s:.1f} s")
    reader = PostgresChunkReader(args.dsn, [], {})
    output = SparkOutput(config, tables=reader.table_info, session=spark)
    settings = EngineSettings(chunk_size=args.chunk_size,
                              output_queue_batches=args.queue_batches)
    dump = dblog_dump(args.dsn, output, workdir, settings, args.rows)
    progress(f"dump: {dump}")
    dump_batches: dict[str, Any] = {
        **latency(output.batch_seconds),
        "step_seconds": {k: round(v, 2) for k, v in output.timings.items()}}
    output = SparkOutput(config, tables=reader.table_info, session=spark)
    stream = dblog_stream(args.dsn, output, workdir, settings, args.updates)
    progress(f"stream: {stream}")
    peak = round(rss_kb()["VmHWM"] / 1024, 1)
    kinds = kinds_of(reader.table_info(TableId.parse(TABLE)))
    batch = max(1000, dump["rows"] // max(1, dump_batches.get("flushes", 1)))
    raw = raw_writes(spark, workdir, source_rows(args.dsn), source_rows(args.dsn, args.updates),
                     kinds, batch)
    reader.close()
    return {"session_start_s": round(session_s, 2), "dump": dump, "stream": stream,
            "dump_batches": dump_batches,
            "stream_batches": {**latency(output.batch_seconds), "step_seconds": {
                k: round(v, 2) for k, v in output.timings.items()}},
            "peak_rss_mb": peak, "raw": raw, "raw_batch_rows": batch}


def report(args: argparse.Namespace, got: dict[str, Any]) -> dict[str, Any]:
    dump, stream, raw = got["dump"], got["stream"], got["raw"]
    dump_rate = dump["rows"] / dump["seconds"]
    stream_rate = stream["updates"] / stream["seconds"]
    return {
        "db": "postgres", "output": "spark-delta", "master": args.master,
        "commit_interval_s": args.commit_interval,
        "commit_idle_s": args.commit_idle,
        "output_queue_batches": args.queue_batches,
        "rows": dump["rows"], "updates": stream["updates"],
        "session_start_s": got["session_start_s"],
        "dump_rows_per_s": round(dump_rate, 1),
        "raw_dump_rows_per_s": round(raw["raw_dump"], 1),
        "dump_ratio": round(dump_rate / raw["raw_dump"], 4),
        "raw_merge_dump_rows_per_s": round(raw["raw_merge_dump"], 1),
        "dump_ratio_vs_raw_merge": round(dump_rate / raw["raw_merge_dump"], 4),
        "stream_events_per_s": round(stream_rate, 1),
        "raw_stream_events_per_s": round(raw["raw_stream"], 1),
        "stream_ratio": round(stream_rate / raw["raw_stream"], 4),
        "raw_merge_stream_events_per_s": round(raw["raw_merge_stream"], 1),
        "stream_ratio_vs_raw_merge": round(stream_rate / raw["raw_merge_stream"], 4),
        "dump_batch_latency": got["dump_batches"], "stream_batch_latency": got["stream_batches"],
        "raw_batch_rows": got["raw_batch_rows"],
        "rss_mb_during_dump": dump["rss_mb"], "peak_rss_mb": got["peak_rss_mb"],
        "targets": {"dump_ratio": 0.5, "stream_ratio": 0.5},
    }


def measure(args: argparse.Namespace, dsn: str, workdir: Path) -> dict[str, Any]:
    load_source(dsn, args.rows)
    try:
        cmd = [sys.executable, __file__, "--child", "--dsn", dsn, "--workdir", str(workdir),
               "--rows", str(args.rows), "--updates", str(args.updates),
               "--chunk-size", str(args.chunk_size), "--master", args.master,
               "--commit-interval", str(args.commit_interval),
               "--queue-batches", str(args.queue_batches)]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, check=True, text=True)
        got: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        clean_source(dsn, [SLOT])
    return report(args, got)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source_args(parser, rows=1_000_000)
    parser.add_argument("--output", choices=["spark-delta"], default="spark-delta")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--queue-batches", type=int, default=25,
                        help="the engine's output_queue_batches (batches of 2,000 events): "
                             "capture goes on while the output commits")
    parser.add_argument("--commit-interval", type=float, default=2.0,
                        help="the output's commit_interval_s (the stream's last flush waits "
                             "for it)")
    parser.add_argument("--commit-idle", type=float, default=1.0,
                        help="the output's commit_idle_s (the end of the dump and of the "
                             "stream is written this long after their last event)")
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args(argv)
    if args.child:
        print(json.dumps(child(args)), flush=True)
        return 0
    return on_postgres(args.dsn, "dblog-bench-spark-",
                       lambda dsn, workdir: measure(args, dsn, workdir))


if __name__ == "__main__":
    sys.exit(main())
