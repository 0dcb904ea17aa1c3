"""What the PostgreSQL (run.py) and MariaDB (mysql.py, mysql_child.py) benchmarks share: the
dblog child's memory and liveness probes, and the summary every ``--db`` mode prints; and the
run of a replica benchmark (replica.py, spark.py) on a throwaway PostgreSQL."""

from __future__ import annotations

import contextlib
import json
import resource
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TARGETS = {"dump_ratio": 0.5, "stream_ratio": 0.5}


def child_result(command: list[str], phase: str) -> dict[str, Any]:
    """Run a benchmark child process (stderr passes through); the last JSON object line it
    printed on stdout."""
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=None, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"dblog {phase} child failed with exit code {proc.returncode}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"dblog {phase} child printed no result: {proc.stdout[-500:]!r}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def rss_kb() -> dict[str, int]:
    """VmRSS and VmHWM of this process in kB (from /proc; falls back to ru_maxrss)."""
    out: dict[str, int] = {}
    with contextlib.suppress(OSError), open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":", 1)
                out[key] = int(value.split()[0])
    out.setdefault("VmHWM", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return out


def on_source(db: str, dsn: str | None, prefix: str,
              measure: Callable[[str, Path], dict[str, Any]]) -> int:
    """Print ``measure(dsn, workdir)`` as ONE JSON line on stdout; 0 (the exit status).
    ``measure`` runs on the ``db`` server at ``dsn``, or (None) on a throwaway one started and
    stopped here, with a temporary folder (named ``prefix...``) removed after it."""
    server = None
    if dsn is None:
        from sources import start_server

        dsn, server = start_server(db)
    try:
        with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
            result = measure(dsn, Path(tmp))
    finally:
        if server is not None:
            server.stop()
    print(json.dumps(result), flush=True)
    return 0


def on_postgres(dsn: str | None, prefix: str,
                measure: Callable[[str, Path], dict[str, Any]]) -> int:
    """:func:`on_source` on PostgreSQL."""
    return on_source("postgres", dsn, prefix, measure)


def alive(pipeline: Any) -> None:
    thread = pipeline._thread
    if thread is not None and not thread.is_alive():
        pipeline.join(0)
        raise RuntimeError("the pipeline stopped unexpectedly")


def wait_dump(pipeline: Any, dump_id: str, started: float,
              timeout_s: float) -> tuple[dict[str, Any], float, float]:
    """Wait until the dump is done and everything emitted is committed; return the dump's
    status and the times it was done and flushed. A failed or cancelled dump raises."""
    done_at = None
    while True:
        status = pipeline.status()
        dump = next((d for d in status["dumps"] if d["id"] == dump_id), None)
        if dump is not None and dump["state"] in ("failed", "cancelled"):
            raise RuntimeError(f"dump {dump['state']}: {dump.get('error')}")
        if dump is not None and dump["state"] == "done":
            done_at = done_at or time.monotonic()
            if status["committed_seq"] >= status["emitted_seq"]:
                return dump, done_at, time.monotonic()
        if time.monotonic() > started + timeout_s:
            raise RuntimeError(f"dump not done after {timeout_s}s: {dump}")
        alive(pipeline)
        time.sleep(0.01)


def wait_stream(pipeline: Any, expected_seq: int, started: float,
                timeout_s: float) -> tuple[dict[str, Any], float, float]:
    """Wait until ``expected_seq`` is committed; return the last status and the times it was
    emitted and committed."""
    emitted_at = None
    while True:
        status = pipeline.status()
        if emitted_at is None and status["emitted_seq"] >= expected_seq:
            emitted_at = time.monotonic()
        if status["committed_seq"] >= expected_seq:
            committed_at = time.monotonic()
            return status, emitted_at or committed_at, committed_at
        if time.monotonic() > started + timeout_s:
            raise RuntimeError(f"stream not consumed after {timeout_s}s: {status}")
        alive(pipeline)
        time.sleep(0.01)


def count_ops(path: Path, op: str) -> int:
    needle = f'"op":"{op}"'.encode()
    with open(path, "rb") as handle:
        return sum(1 for line in handle if needle in line)


def summary(db: str, rows: int, chunk_size: int, dump: dict[str, Any],
            raw_dump_runs: list[float], stream: dict[str, Any],
            raw_stream_runs: list[float]) -> tuple[dict[str, Any], dict[str, float]]:
    """The keys every mode prints, and the rates (dump, raw_dump, stream, raw_stream): dblog's
    rates against the median raw dump and the mean raw stream of the same run."""
    rates = {"dump": dump["rows"] / dump["seconds"], "raw_dump": statistics.median(raw_dump_runs),
             "stream": stream["updates"] / stream["seconds"],
             "raw_stream": statistics.mean(raw_stream_runs)}
    ratios = {"dump_ratio": rates["dump"] / rates["raw_dump"],
              "stream_ratio": rates["stream"] / rates["raw_stream"]}
    return {
        "db": db,
        "rows": rows,
        "chunk_size": chunk_size,
        "dump_rows_per_s": round(rates["dump"], 1),
        "raw_dump_rows_per_s": round(rates["raw_dump"], 1),
        "dump_ratio": round(ratios["dump_ratio"], 4),
        "stream_events_per_s": round(rates["stream"], 1),
        "raw_stream_events_per_s": round(rates["raw_stream"], 1),
        "stream_ratio": round(ratios["stream_ratio"], 4),
        "peak_rss_mb": round(max(dump["peak_rss_mb"], stream["peak_rss_mb"]), 1),
        "peak_rss_mb_dump": round(dump["peak_rss_mb"], 1),
        "peak_rss_mb_stream": round(stream["peak_rss_mb"], 1),
        "child_baseline_rss_mb": round(dump["rss_baseline_mb"], 1),
        "targets": TARGETS,
        "targets_met": {k: ratios[k] >= v for k, v in TARGETS.items()},
    }, rates
