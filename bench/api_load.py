"""API load against a capturing instance: capture throughput with and without 200 concurrent
API clients.

Starts a throwaway PostgreSQL (the harness; or ``DBLOG_PG_DSN``), a pipeline with its API,
and a steady write load from a separate process (``--rate`` rows a second, 50-row
transactions). Two windows of ``--seconds`` each: first the write load alone, then the same
load with ``--clients`` concurrent API clients (another process, asyncio + httpx) polling
status, dumps, a dump, metrics and health. Prints captured events a second in each window,
their ratio, the clients' request count, error answers and latencies, and the lag at the end.

    python bench/api_load.py [--seconds 30] [--clients 200] [--rate 4000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TOKEN = "bench-token"


def write_load(dsn: str, rate: int, seconds: float) -> None:
    """Insert ``rate`` rows a second in 50-row transactions for ``seconds``."""
    import psycopg

    per_tx, start, n = 50, time.monotonic(), 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() - start < seconds:
            conn.execute("INSERT INTO load (v) SELECT md5(g::text) FROM generate_series(1, %s) g",
                         (per_tx,))
            n += per_tx
            ahead = n / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)


async def _client(url: str, seconds: float, dump_id: str, out: list[tuple[int, float]]) -> None:
    import httpx

    paths = ["/api/v1/status", "/api/v1/dumps", f"/api/v1/dumps/{dump_id}", "/metrics",
             "/readyz"]
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
        deadline, i = time.monotonic() + seconds, 0
        while time.monotonic() < deadline:
            started = time.monotonic()
            try:
                code = (await client.get(paths[i % len(paths)])).status_code
            except httpx.HTTPError:
                code = 0
            out.append((code, time.monotonic() - started))
            i += 1


def client_load(url: str, clients: int, seconds: float, dump_id: str, result: Any) -> None:
    out: list[tuple[int, float]] = []

    async def main() -> None:
        await asyncio.gather(*(_client(url, seconds, dump_id, out) for _ in range(clients)))

    asyncio.run(main())
    result.put(out)


def _window(env: dict[str, Any], seconds: float, rate: int, clients: int) -> dict[str, Any]:
    pipeline = env["pipeline"]
    writer = multiprocessing.Process(target=write_load, args=(env["dsn"], rate, seconds))
    result: Any = multiprocessing.Queue()
    load = multiprocessing.Process(target=client_load, args=(
        env["url"], clients, seconds, env["dump_id"], result)) if clients else None
    before, started = pipeline.status()["emitted_seq"], time.monotonic()
    writer.start()
    if load is not None:
        load.start()
    writer.join()
    elapsed = time.monotonic() - started
    emitted = pipeline.status()["emitted_seq"] - before
    answers: list[tuple[int, float]] = result.get() if load is not None else []
    if load is not None:
        load.join()
    latencies = sorted(t for _, t in answers)
    return {
        "clients": clients, "seconds": round(elapsed, 1),
        "captured_events_per_s": round(emitted / elapsed),
        "requests": len(answers), "errors": sum(1 for c, _ in answers if not 200 <= c < 300),
        "p50_ms": round(1000 * statistics.median(latencies), 1) if latencies else None,
        "p99_ms": round(1000 * latencies[int(len(latencies) * 0.99)], 1) if latencies else None,
        "lag_s_after": pipeline.status()["metrics"]["lag_s"],
    }


def _start(dsn: str, tmp: Path) -> dict[str, Any]:
    import psycopg

    from dblog.api.config import ApiConfig
    from dblog.api.server import ApiServer
    from dblog.app.pipeline import Pipeline
    from dblog.connectors.postgres import PostgresConnector
    from dblog.engine import EngineSettings
    from dblog.outputs.jsonl import JsonlOutput

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE load (id bigserial PRIMARY KEY, v text)")
        conn.execute("CREATE TABLE small (id int PRIMARY KEY)")
        conn.execute("INSERT INTO small SELECT generate_series(1, 10)")
    os.environ["DBLOG_BENCH_TOKEN"] = TOKEN
    pipeline = Pipeline(PostgresConnector({"dsn": dsn, "slot": "bench_api", "tables": [
        "public.*"]}, "bench"), [JsonlOutput({"path": str(tmp / "out.jsonl"), "fsync": False})],
        state_path=str(tmp / "state.json"),
        settings=EngineSettings(flush_interval_s=0.5)).start()
    server = ApiServer(pipeline, ApiConfig(token_env="DBLOG_BENCH_TOKEN")).start()
    dump_id = pipeline.dump(["public.small"])
    return {"dsn": dsn, "pipeline": pipeline, "server": server, "url": server.url,
            "dump_id": dump_id}


@contextlib.contextmanager
def _database() -> Iterator[str]:
    """A fresh database on ``DBLOG_PG_DSN``'s server, or on a throwaway harness server."""
    import psycopg

    from dblog.harness.postgres import start_postgres

    server = None if os.environ.get("DBLOG_PG_DSN") else start_postgres()
    admin = os.environ["DBLOG_PG_DSN"] if server is None else server.dsn()
    name = f"bench_api_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield " ".join([*(p for p in admin.split() if not p.startswith("dbname=")),
                        f"dbname={name}"])
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                         "WHERE database = %s AND NOT active", (name,))
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if server is not None:
            server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--rate", type=int, default=4000, help="rows written a second")
    args = parser.parse_args()
    with _database() as dsn, tempfile.TemporaryDirectory() as tmp:
        env = _start(dsn, Path(tmp))
        try:
            time.sleep(2)
            alone = _window(env, args.seconds, args.rate, 0)
            loaded = _window(env, args.seconds, args.rate, args.clients)
        finally:
            env["server"].stop()
            env["pipeline"].stop()
    ratio = loaded["captured_events_per_s"] / max(1, alone["captured_events_per_s"])
    print(json.dumps({"without_clients": alone, "with_clients": loaded,
                      "throughput_ratio": round(ratio, 3)}, indent=2))
    return 0 if loaded["errors"] == 0 and ratio >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
