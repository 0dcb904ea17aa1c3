"""A PostgreSQL BEGIN event carries its transaction's commit end (wal2json's ``nextlsn``), the
same position as its COMMIT: replica outputs order a transaction's rows by it on arrival."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from dblog.app.pipeline import Pipeline
from dblog.connectors.postgres import PostgresConnector
from dblog.engine import EngineSettings
from dblog.outputs.jsonl import JsonlOutput

from .pgutil import read_events, wait_until

pytestmark = pytest.mark.integration


def test_begin_is_positioned_at_its_commit(pg_dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE begins (id int PRIMARY KEY, v text)")
    out = tmp_path / "out.jsonl"
    pipeline = Pipeline(
        PostgresConnector({"dsn": pg_dsn, "slot": "begins", "tables": ["public.begins"]}, "b"),
        [JsonlOutput({"path": str(out)})], state_path=str(tmp_path / "s.json"),
        settings=EngineSettings(flush_interval_s=0.1)).start()
    try:
        with psycopg.connect(pg_dsn) as conn:
            for n in range(3):
                conn.execute("INSERT INTO begins VALUES (%s, 'x'), (%s, 'y')", (n * 2, n * 2 + 1))
                conn.commit()
        wait_until(lambda: sum(e["op"] == "commit" for e in read_events(out)) >= 3, 30,
                   "three transactions")
    finally:
        pipeline.stop()
    events = read_events(out)
    begins = {e["txid"]: e["pos"] for e in events if e["op"] == "begin"}
    commits = {e["txid"]: e["pos"] for e in events if e["op"] == "commit"}
    inserts = [e for e in events if e["op"] == "insert"]
    assert len(begins) == 3 and begins == commits
    assert all(e["pos"] != commits[e["txid"]] for e in inserts)  # rows keep their own LSN
