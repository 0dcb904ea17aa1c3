"""dblog demo: capture a live PostgreSQL table while a writer changes it, then prove the output
equals the source.

Starts a throwaway PostgreSQL (wal_level=logical, wal2json), loads a sample ``orders`` table,
starts a concurrent writer (inserts, updates, deletes), runs a full dump through dblog into a
JSON-lines file while the writer runs, stops the writer, waits for the stream to catch up, then
replays the file (upsert after-images, delete on delete) and compares it with the table. The
same capture also feeds a SQLite replica and a Delta table (replica outputs: the guarded apply
of docs/replica.md); each is read back as its readers see it and compared with the table.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import psycopg

from dblog import EngineSettings, Pipeline
from dblog.connectors.postgres import PostgresConnector
from dblog.connectors.postgres.chunks import PostgresChunkReader
from dblog.connectors.postgres.positions import Lsn
from dblog.core.model import EncodedRow, Key, Row, TableId, TableInfo
from dblog.harness.postgres import start_postgres
from dblog.outputs import delta, sql
from dblog.outputs.jsonl import JsonlOutput
from dblog.testing import replay

SCHEMA = """
CREATE TABLE orders (
  id bigint PRIMARY KEY, customer_id int NOT NULL, status varchar(16) NOT NULL,
  amount numeric(12,2) NOT NULL, note text, created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now());
INSERT INTO orders (id, customer_id, status, amount, note)
SELECT g, g % 5000, (ARRAY['new','paid','shipped','done'])[1 + g % 4], (g % 100000) / 100.0,
       md5(g::text) || md5((g * 7)::text)
FROM generate_series(1, %(rows)s) g;
"""


def writer(dsn: str, rows: int, stop: threading.Event, counter: list[int]) -> None:
    rng = random.Random(42)
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            key, op = rng.randrange(1, int(rows * 1.1)), rng.random()
            if op < 0.6:
                conn.execute("UPDATE orders SET status = 'changed', amount = amount + 1, "
                             "updated_at = now() WHERE id = %s", (key,))
            elif op < 0.8:
                conn.execute("DELETE FROM orders WHERE id = %s", (key,))
            else:
                conn.execute("INSERT INTO orders (id, customer_id, status, amount, note) VALUES "
                             "(%s, 1, 'new', 9.99, 'demo') ON CONFLICT (id) DO NOTHING", (key,))
            counter[0] += 1


def source_rows(dsn: str) -> dict[object, dict[str, object]]:
    reader = PostgresChunkReader(dsn, [], {})
    info = reader.table_info(TableId("public", "orders"))
    rows = reader.read_chunk(info, None, None, 10**9).rows
    reader.close()
    return {(("public", "orders"), key): row.decode() if isinstance(row, EncodedRow) else row
            for key, row in rows}


def table_lookup(dsn: str) -> tuple[PostgresChunkReader, Callable[[TableId], TableInfo]]:
    """The source's table metadata for the replica outputs (they call it from their own
    threads: one reader, one call at a time)."""
    reader, lock = PostgresChunkReader(dsn, [], {}), threading.Lock()

    def lookup(table: TableId) -> TableInfo:
        with lock:
            return reader.table_info(table)
    return reader, lookup


def compare_replica(name: str, rows: dict[Key, Row], source: dict[object, object]) -> bool:
    expected = {key: row for (_, key), row in source.items()}  # type: ignore[misc]
    if rows == expected:
        print(f"OK: the {name} equals the source table ({len(rows):,} rows)")
        return True
    print(f"MISMATCH in the {name}: {len(set(expected) - set(rows))} missing, "
          f"{len(set(rows) - set(expected))} extra")
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--chunk-size", type=int, default=2000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    work = Path(tempfile.mkdtemp(prefix="dblog-demo-"))
    print(f"starting a throwaway PostgreSQL and loading {args.rows:,} orders ...", flush=True)
    server = start_postgres()
    try:
        dsn = server.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SCHEMA.replace("%(rows)s", str(args.rows)))
            conn.execute("VACUUM ANALYZE orders")
        output = work / "orders.jsonl"
        reader, lookup = table_lookup(dsn)
        replicas = {"url": f"sqlite:///{work / 'replica.db'}"}, {"path": str(work / "delta")}
        pipeline = Pipeline(
            PostgresConnector({"dsn": dsn, "slot": "demo", "tables": ["public.orders"]}, "demo"),
            [JsonlOutput({"path": str(output)}), sql.SqlOutput(replicas[0], tables=lookup),
             delta.DeltaOutput(replicas[1], tables=lookup)], state_path=str(work / "state.json"),
            settings=EngineSettings(chunk_size=args.chunk_size),
        ).start()
        stop, changes = threading.Event(), [0]
        thread = threading.Thread(target=writer, args=(dsn, args.rows, stop, changes))
        thread.start()
        started = time.monotonic()
        dump_id = pipeline.dump(["public.orders"])
        while (status := pipeline.dump_status(dump_id))["state"] != "done":
            done = status["tables"][0]["rows"]
            print(f"  dump {dump_id}: {done:,} rows emitted, writer made {changes[0]:,} changes",
                  flush=True)
            time.sleep(2)
        dump_s = time.monotonic() - started
        stop.set()
        thread.join()
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
            target = Lsn.parse(row[0]) if row else Lsn(0)
        while Lsn.parse(pipeline.status()["committed_position"] or "0/0") < target:
            time.sleep(0.2)
        pipeline.stop()
        with open(output, "rb") as handle:
            events = [orjson.loads(line) for line in handle]
        reads = sum(1 for e in events if e["op"] == "read")
        replayed = {(t, tuple(k)): r for (t, k), r in replay(events).items()}
        source = source_rows(dsn)
        print(f"dump: {reads:,} rows read in {dump_s:.1f}s ({reads / dump_s:,.0f} rows/s) while "
              f"the writer made {changes[0]:,} changes; {len(events):,} events in {output}")
        ok = replayed == source
        if ok:
            print(f"OK: the replayed output equals the source table ({len(source):,} rows)")
        else:
            missing = set(source) - set(replayed)
            extra = set(replayed) - set(source)
            differ = [k for k in set(source) & set(replayed) if source[k] != replayed[k]]
            print(f"MISMATCH: {len(missing)} missing, {len(extra)} extra, {len(differ)} differ")
        info = lookup(TableId("public", "orders"))
        reader.close()
        ok &= compare_replica(f"SQLite replica ({work / 'replica.db'}, view orders_live)",
                              sql.read_live(replicas[0], info), source)
        ok &= compare_replica(f"Delta table ({work / 'delta'}/public.orders, read with "
                              "_dblog_deleted = false)", delta.read_live(replicas[1], info),
                              source)
        return 0 if ok else 1
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
