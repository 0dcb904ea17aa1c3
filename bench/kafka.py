#!/usr/bin/env python
"""dblog into Kafka from PostgreSQL or MariaDB: dblog versus a raw confluent-kafka producer loop.

    python bench/run.py --db postgres|mariadb --output kafka --rows 200000 [--chunk-size 1000]
        [--dsn DSN] [--bootstrap HOST:PORT] [--modes at-least-once,exactly-once]

(``bench/run.py`` dispatches here.) Prints ONE JSON line on stdout; progress goes to stderr.
Everything comes from the same run, the same database server and the same broker (throwaway
ones from the harness unless ``--dsn`` / ``--bootstrap`` / ``DBLOG_KAFKA_BOOTSTRAP``), per
delivery mode (the source side per ``--db``: bench/sources.py):

* dump:   a full dblog dump (Pipeline + PostgresConnector + KafkaOutput, native format) of an
          N-row table into a fresh topic, timed until every row is committed (acknowledged by
          the broker / committed in a transaction);
* stream: N single-row UPDATEs in transactions of 1,000 written while no consumer runs, then
          consumed by dblog into a fresh topic, timed until the last one is committed;
* raw:    the records dblog wrote in each phase (key, value, headers, read back from the
          topic beforehand, untimed) sent again by a bare confluent-kafka loop into a fresh
          topic with the same producer settings: ``produce`` per record (``poll`` on a full
          queue) and one ``flush`` at the end; in exactly-once mode a transactional producer
          committing every ``chunk-size`` records.

Ratios are dblog's rate over the raw loop's rate of the same records. The dblog side runs in
child processes (this script with ``--child``) so its peak RSS is its own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from common import rss_kb, wait_dump, wait_stream
from run import TX_SIZE, progress
from sources import SourceSide, connector, source_side, start_server

MODES = ("at-least-once", "exactly-once")


def output_config(bootstrap: str, prefix: str, mode: str) -> dict[str, Any]:
    return {"bootstrap_servers": bootstrap, "prefix": prefix, "delivery": mode,
            "transactional_id": f"bench-{prefix}"}


# -- dblog side (child process) ----------------------------------------------------------------


def child(phase: str, args: dict[str, Any]) -> dict[str, Any]:
    from dblog.app.pipeline import Pipeline
    from dblog.engine import EngineSettings
    from dblog.outputs.kafka import KafkaOutput

    baseline = rss_kb()
    pipeline = Pipeline(
        connector(args, phase),
        [KafkaOutput(output_config(args["bootstrap"], args["prefix"], args["mode"]))],
        state_path=str(Path(args["workdir"]) / f"{args['prefix']}-state.json"),
        settings=EngineSettings(chunk_size=args["chunk_size"]))
    started = time.monotonic()  # the stream is timed from the start, as in run.py
    pipeline.start()
    try:
        if phase == "dump":
            started = time.monotonic()  # the dump from its request, as in run.py
            dump_id = pipeline.dump([args["table"]])
            dump, _, done_at = wait_dump(pipeline, dump_id, started, args["timeout_s"])
            count = sum(t["rows"] for t in dump["tables"])
        else:
            _, _, done_at = wait_stream(pipeline, args["expected_seq"], started,
                                        args["timeout_s"])
            count = args["rows"]
    finally:
        pipeline.stop()
    mem = rss_kb()
    return {"count": count, "seconds": done_at - started,
            "rss_baseline_mb": baseline.get("VmRSS", 0) / 1024,
            "peak_rss_mb": mem["VmHWM"] / 1024}


def run_child(phase: str, args: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", phase,
                           "--child-args", json.dumps(args)],
                          stdout=subprocess.PIPE, stderr=None, text=True, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"dblog {phase} child failed ({proc.returncode}): "
                           f"{proc.stdout[-500:]!r}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


# -- the raw loop (parent) ---------------------------------------------------------------------

Header = tuple[str, str | bytes | None]
Record = tuple[bytes | None, bytes | None, list[Header]]


def read_records(bootstrap: str, topic: str, expected: int) -> list[Record]:
    """The records of ``topic`` (read_committed), in partition order, untimed."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    meta = consumer.list_topics(topic, timeout=30).topics[topic]
    consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
    out: list[Record] = []
    deadline = time.monotonic() + 600
    while len(out) < expected and time.monotonic() < deadline:
        for m in consumer.consume(10_000, 1.0):
            if m.error() is None:
                headers = m.headers() or []  # a list from a consumer; typed as list or dict
                out.append((m.key(), m.value(), list(
                    headers.items() if isinstance(headers, dict) else headers)))
    consumer.close()
    if len(out) != expected:
        raise RuntimeError(f"{topic}: read {len(out)} records, expected {expected}")
    return out


def raw_produce(bootstrap: str, records: list[Record], mode: str, batch: int) -> float:
    """Records/s of a bare producer loop with the output's settings into a fresh topic."""
    from confluent_kafka import Producer

    from dblog.outputs.kafka_config import PRODUCER_DEFAULTS

    topic = f"raw-{uuid.uuid4().hex[:10]}"
    settings = {**PRODUCER_DEFAULTS, "bootstrap.servers": bootstrap}
    if mode == "exactly-once":
        settings["transactional.id"] = f"raw-{topic}"
    producer = Producer(settings)
    transactional = mode == "exactly-once"
    if transactional:
        producer.init_transactions(30)
        producer.begin_transaction()
    producer.produce(topic, b"warm-up")  # topic creation and metadata, untimed
    if transactional:
        producer.commit_transaction(30)
    producer.flush(30)
    failed: list[object] = []

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            failed.append(err)

    started = time.monotonic()
    for start in range(0, len(records), batch):
        if transactional:
            producer.begin_transaction()
        for key, value, headers in records[start:start + batch]:
            while True:
                try:
                    producer.produce(topic, value, key, on_delivery=delivered, headers=headers)
                    break
                except BufferError:
                    producer.poll(0.05)
        if transactional:
            producer.commit_transaction(60)
    producer.flush(120)
    seconds = time.monotonic() - started
    if failed or len(producer):
        raise RuntimeError(f"raw producer: {len(failed)} failed, {len(producer)} left")
    return len(records) / seconds


# -- the benchmark -----------------------------------------------------------------------------


def bench_mode(source: SourceSide, mode: str, common: dict[str, Any], rows: int
               ) -> dict[str, Any]:
    tag = "alo" if mode == "at-least-once" else "eo"
    prefix = f"kb{tag}{uuid.uuid4().hex[:6]}"
    table = source.table
    topic = f"{prefix}.{table}"
    base = {**common, "mode": mode}
    source.before_phase("dump")
    source.before_phase("stream")
    progress(f"[{mode}] dblog dump into {topic}")
    dump = run_child("dump", {**base, "prefix": prefix, "name": f"d{tag}"})
    dump_rate = dump["count"] / dump["seconds"]
    progress(f"[{mode}] dblog dump: {dump['count']} rows in {dump['seconds']:.2f}s = "
             f"{dump_rate:,.0f} rows/s, peak RSS {dump['peak_rss_mb']:.0f} MB")
    source.after_phase("dump")
    records = read_records(common["bootstrap"], topic, rows)
    raw_dump = raw_produce(common["bootstrap"], records, mode, common["chunk_size"])
    del records
    progress(f"[{mode}] raw producer, same records: {raw_dump:,.0f} records/s")

    extra = source.write_updates(rows)
    transactions = -(-rows // TX_SIZE)
    sprefix = f"ks{tag}{uuid.uuid4().hex[:6]}"
    progress(f"[{mode}] dblog stream of {rows} updates into {sprefix}.{table}")
    stream = run_child("stream", {**base, **extra, "prefix": sprefix, "name": f"s{tag}",
                                  "expected_seq": rows + 2 * transactions})
    stream_rate = stream["count"] / stream["seconds"]
    progress(f"[{mode}] dblog stream: {stream_rate:,.0f} events/s, peak RSS "
             f"{stream['peak_rss_mb']:.0f} MB")
    source.after_phase("stream")
    records = read_records(common["bootstrap"], f"{sprefix}.{table}", rows)
    raw_stream = raw_produce(common["bootstrap"], records, mode, common["chunk_size"])
    del records
    progress(f"[{mode}] raw producer, same records: {raw_stream:,.0f} records/s")
    return {"dump_rows_per_s": round(dump_rate, 1), "raw_dump_records_per_s": round(raw_dump, 1),
            "dump_ratio": round(dump_rate / raw_dump, 4),
            "stream_events_per_s": round(stream_rate, 1),
            "raw_stream_records_per_s": round(raw_stream, 1),
            "stream_ratio": round(stream_rate / raw_stream, 4),
            "peak_rss_mb_dump": round(dump["peak_rss_mb"], 1),
            "peak_rss_mb_stream": round(stream["peak_rss_mb"], 1),
            "child_baseline_rss_mb": round(dump["rss_baseline_mb"], 1)}


def bench(db: str, dsn: str, bootstrap: str, rows: int, chunk_size: int, modes: list[str],
          workdir: Path, timeout_s: float) -> dict[str, Any]:
    source = source_side(db, dsn)
    try:
        progress(f"loading {rows} rows into {source.table}")
        source.load(rows)
        common = {"db": db, "dsn": dsn, "table": source.table, "bootstrap": bootstrap,
                  "chunk_size": chunk_size, "rows": rows, "workdir": str(workdir),
                  "timeout_s": timeout_s}
        results = {mode: bench_mode(source, mode, common, rows) for mode in modes}
    finally:
        source.close()
    ratios = [r[k] for r in results.values() for k in ("dump_ratio", "stream_ratio")]
    return {"db": db, "output": "kafka", "rows": rows, "chunk_size": chunk_size,
            "modes": results, "target_ratio": 0.5, "targets_met": min(ratios) >= 0.5,
            "cpu_count": os.cpu_count()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["postgres", "mariadb"], default="postgres")
    parser.add_argument("--output", choices=["kafka"], default="kafka")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--chunk-size", type=int, default=1000)
    parser.add_argument("--dsn")
    parser.add_argument("--bootstrap", default=os.environ.get("DBLOG_KAFKA_BOOTSTRAP"))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--child", choices=["dump", "stream"], help=argparse.SUPPRESS)
    parser.add_argument("--child-args", help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args(argv)
    if args.child:
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
        print(json.dumps(child(args.child, json.loads(args.child_args))), flush=True)
        return 0
    modes = [m for m in args.modes.split(",") if m]
    if not set(modes) <= set(MODES):
        parser.error(f"--modes: use {', '.join(MODES)}")
    with contextlib.ExitStack() as stack:
        dsn, bootstrap = args.dsn, args.bootstrap
        if not dsn:
            progress(f"starting a throwaway {args.db} server")
            dsn, server = start_server(args.db)
            stack.callback(server.stop)
        if not bootstrap:
            from dblog.harness.kafka import start_kafka

            progress("starting a throwaway Kafka broker")
            cluster = start_kafka()
            stack.callback(cluster.stop)
            bootstrap = cluster.bootstrap
        workdir = Path(tempfile.mkdtemp(prefix="dblog-kbench-"))
        result = bench(args.db, dsn, bootstrap, args.rows, args.chunk_size, modes, workdir,
                       args.timeout)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
