"""The dblog side of the MariaDB benchmark (bench/mysql.py), run in child processes."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common import count_ops, rss_kb, wait_dump, wait_stream

if TYPE_CHECKING:
    from dblog.app.pipeline import Pipeline

DATABASE = "dblog_bench"
TABLE = f"{DATABASE}.dblog_bench"

_T0 = time.monotonic()


def progress(message: str) -> None:
    print(f"[bench {time.monotonic() - _T0:7.1f}s] {message}", file=sys.stderr, flush=True)


def _pipeline(args: dict[str, Any], name: str, start: str | None = None) -> Pipeline:
    from dblog.app.pipeline import Pipeline
    from dblog.connectors.mysql import MysqlConnector
    from dblog.engine import EngineSettings
    from dblog.outputs.jsonl import JsonlOutput
    from dblog.state import FileStateStore

    work = Path(args["workdir"])
    state_path = work / f"{name}-state.json"
    if start is not None:  # resume from the position taken before the updates
        FileStateStore(state_path).save({"position": start, "seq": 0, "dumps": []}, None, 0)
    return Pipeline(
        MysqlConnector({"dsn": args["dsn"], "tables": [TABLE], "server_id": args["server_id"],
                        "heartbeat_s": args.get("heartbeat_s", 0.02)},
                       name),
        [JsonlOutput({"path": str(work / f"{name}.jsonl")})], state_path=str(state_path),
        settings=EngineSettings(chunk_size=args["chunk_size"]))


def child_dump(args: dict[str, Any]) -> dict[str, Any]:
    name = "bench_dump"
    baseline = rss_kb()
    pipeline = _pipeline(args, name).start()
    try:
        started = time.monotonic()
        dump_id = pipeline.dump([TABLE])
        dump, done_at, flushed_at = wait_dump(pipeline, dump_id, started, args["timeout_s"])
        chunks = sum(t["chunks"] for t in dump["tables"])
    finally:
        pipeline.stop()
    rows = count_ops(Path(args["workdir"]) / f"{name}.jsonl", "read")
    return {"rows": rows, "chunks": chunks, "seconds": flushed_at - started,
            "seconds_to_done": done_at - started,
            "rss_baseline_mb": baseline.get("VmRSS", 0) / 1024,
            "peak_rss_mb": rss_kb()["VmHWM"] / 1024}


def child_stream(args: dict[str, Any]) -> dict[str, Any]:
    name = "bench_stream"
    baseline = rss_kb()
    started = time.monotonic()
    pipeline = _pipeline(args, name, start=args["start"]).start()
    try:
        _, emitted_at, committed_at = wait_stream(pipeline, args["expected_seq"], started,
                                                  args["timeout_s"])
    finally:
        pipeline.stop()
    updates = count_ops(Path(args["workdir"]) / f"{name}.jsonl", "update")
    return {"updates": updates, "seconds": committed_at - started,
            "seconds_to_emitted": emitted_at - started,
            "rss_baseline_mb": baseline.get("VmRSS", 0) / 1024,
            "peak_rss_mb": rss_kb()["VmHWM"] / 1024}


