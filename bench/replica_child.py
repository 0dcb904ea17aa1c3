"""The dblog side of the replica benchmark (bench/replica.py): the replica output, the timed
dump and stream, and the child processes that run them, one per phase, so that a phase's peak
RSS is dblog's own and not the benchmark's (whose raw loop holds the rows in memory).

A child is bench/replica.py with the hidden ``--child PHASE --child-args JSON`` options (as
bench/run.py's); it prints ONE JSON line on stdout, with the phase's figures, its RSS once
the output is built, before the pipeline (``rss_baseline_mb``: the interpreter, the source's
driver and the output's imports) and its peak RSS (``peak_rss_mb``: VmHWM, the high-water
mark of the whole child process).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import child_result, rss_kb, wait_dump
from run import TABLE
from sources import PostgresSide, SourceSide, source_side

PHASES = ("dump", "jsonl", "stream")
REPLICA = Path(__file__).resolve().with_name("replica.py")


def make_output(kind: str, target: str, url: str, side: SourceSide) -> tuple[Any, Any]:
    """The replica output and the chunk reader giving it the table metadata."""
    from dblog.outputs.delta import DeltaOutput
    from dblog.outputs.sql import SqlOutput

    reader = side.chunk_reader()
    lookup = reader.table_info
    if kind == "sql":
        return SqlOutput({"url": url}, tables=lookup), reader
    return DeltaOutput({"path": url}, tables=lookup), reader


def dblog_dump(side: SourceSide, output: Any, workdir: Path, chunk: int,
               name: str = "bench_rep") -> dict[str, Any]:
    from dblog.app.pipeline import Pipeline
    from dblog.engine import EngineSettings

    pipeline = Pipeline(side.pipeline_connector(name), [output],
                        state_path=str(workdir / f"{name}-state.json"),
                        settings=EngineSettings(chunk_size=chunk))
    pipeline.start()
    try:
        rows, seconds = timed_dump(pipeline, 3600, side.table)
    finally:
        pipeline.stop()
    return {"rows": rows, "seconds": seconds}


def timed_dump(pipeline: Any, timeout_s: float, table: str = TABLE) -> tuple[int, float]:
    """Dump the benchmark table through the started ``pipeline``: the rows dumped, and the
    seconds until all of them were committed (``timeout_s`` at most)."""
    started = time.monotonic()
    dump_id = pipeline.dump([table])
    dump, _, flushed_at = wait_dump(pipeline, dump_id, started, timeout_s)
    return sum(t["rows"] for t in dump["tables"]), flushed_at - started


def dblog_stream(side: SourceSide, output: Any, workdir: Path, updates: int) -> dict[str, Any]:
    """Write the updates while dblog is stopped, then time their consumption."""
    from dblog.app.pipeline import Pipeline
    from dblog.engine import EngineSettings

    return timed_stream(side.dsn, updates, lambda: Pipeline(
        side.pipeline_connector("bench_rep"), [output],
        state_path=str(workdir / "bench_rep-state.json"), settings=EngineSettings()),
        side=side)


def timed_stream(dsn: str, updates: int, make_pipeline: Callable[[], Any],
                 wait_s: float = 60.0, side: SourceSide | None = None) -> dict[str, Any]:
    """Write ``updates`` single-row UPDATEs to the source (``side``, default the PostgreSQL
    at ``dsn``), then start the pipeline ``make_pipeline`` builds and time it until its
    committed position passes them (an hour at most); ``wait_s``: how long its start and its
    stop may take."""
    own = side is None
    side = side or PostgresSide(dsn)
    side.write_updates(updates, slot=None)
    end = side.end_position()
    if own:
        side.disconnect()
    pipeline = make_pipeline()
    started = time.monotonic()
    pipeline.start(wait_ready=wait_s)
    try:
        while True:
            position = pipeline.status()["committed_position"]
            if position is not None and side.parse(position) >= end:
                break
            if time.monotonic() > started + 3600:
                raise RuntimeError("the stream was not consumed in an hour")
            time.sleep(0.01)
        seconds = time.monotonic() - started
    finally:
        pipeline.stop(wait_s)
    return {"updates": updates, "seconds": seconds}


def child(phase: str, args: dict[str, Any]) -> dict[str, Any]:
    """One phase in this (child) process: ``dump`` (dblog into the replica), ``jsonl`` (the same
    dump into a JSON-lines file) or ``stream`` (the updates into the replica)."""
    side = source_side(args["db"], args["dsn"])
    workdir = Path(args["workdir"])
    try:
        if phase == "jsonl":
            from dblog.outputs.jsonl import JsonlOutput

            output = JsonlOutput({"path": str(workdir / "ref.jsonl")})
            baseline = rss_kb()
            result = dblog_dump(side, output, workdir, args["chunk_size"], "bench_ref")
        else:
            output, reader = make_output(args["output"], args["target"], args["url"], side)
            baseline = rss_kb()
            try:
                result = (dblog_dump(side, output, workdir, args["chunk_size"]) if phase == "dump"
                          else dblog_stream(side, output, workdir, args["updates"]))
            finally:
                reader.close()
    finally:
        side.disconnect()
    return {**result, "rss_baseline_mb": baseline.get("VmRSS", 0) / 1024,
            "peak_rss_mb": rss_kb()["VmHWM"] / 1024}


def run_child(phase: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run ``phase`` in a child process (bench/replica.py ``--child``); its JSON result."""
    return child_result([sys.executable, str(REPLICA), "--output", args["output"], "--child",
                         phase, "--child-args", json.dumps(args)], phase)
