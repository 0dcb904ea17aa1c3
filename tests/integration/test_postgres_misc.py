"""Idle databases, TOAST updates, and clear errors for bad input on PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from dblog.app.pipeline import Pipeline
from dblog.connectors.postgres import PostgresConnector
from dblog.connectors.postgres.positions import Lsn
from dblog.engine import EngineSettings
from dblog.errors import ConfigError, DumpRequestError, FatalSourceError
from dblog.harness.postgres import start_postgres
from dblog.outputs.jsonl import JsonlOutput

from .pgutil import dump_state, read_events, replayed, source_rows, wait_until

pytestmark = pytest.mark.integration


def _pipeline(dsn: str, tmp: Path, **source: object) -> Pipeline:
    # slots are cluster-wide: one per test database
    slot = "misc_" + dsn.rsplit("dbname=", 1)[-1].split()[0].lower()
    config = {"dsn": dsn, "slot": slot, "tables": ["public.*"], **source}
    settings = EngineSettings(chunk_size=20, flush_interval_s=0.2, heartbeat_interval_s=0.5)
    return Pipeline(PostgresConnector(config, "misc"),
                    [JsonlOutput({"path": str(tmp / "out.jsonl")})],
                    state_path=str(tmp / "state.json"), settings=settings)


def _confirmed(dsn: str) -> Lsn:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                           "WHERE database = current_database()").fetchone()
    assert row is not None
    return Lsn.parse(row[0])


def test_idle_database_slot_advances_and_idle_table_dump_completes(pg_dsn: str,
                                                                  tmp_path: Path) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE idle (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO idle SELECT g, 'v' FROM generate_series(1, 95) g")
    pipeline = _pipeline(pg_dsn, tmp_path).start()
    try:
        first = _confirmed(pg_dsn)
        wait_until(lambda: _confirmed(pg_dsn) > first, 20, "the slot to advance on heartbeats")
        second = _confirmed(pg_dsn)
        wait_until(lambda: _confirmed(pg_dsn) > second, 20, "the slot to keep advancing")
        dump_id = pipeline.dump(["public.idle"])
        wait_until(lambda: dump_state(pipeline, dump_id) == "done", 30, "the dump")
    finally:
        pipeline.stop()
    events = read_events(tmp_path / "out.jsonl")
    assert sorted(e["key"][0] for e in events if e["op"] == "read") == list(range(1, 96))
    assert replayed(events) == source_rows(pg_dsn, ["public.idle"])


def test_toast_unchanged_column_is_never_emitted_as_null(pg_dsn: str, tmp_path: Path) -> None:
    big = "x" * 20000 + "tail"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE doc (id int PRIMARY KEY, n int, body text)")
        conn.execute("ALTER TABLE doc ALTER COLUMN body SET STORAGE EXTERNAL")
        conn.execute("CREATE TABLE docfull (id int PRIMARY KEY, n int, body text)")
        conn.execute("ALTER TABLE docfull ALTER COLUMN body SET STORAGE EXTERNAL")
        conn.execute("ALTER TABLE docfull REPLICA IDENTITY FULL")
        for table in ("doc", "docfull"):
            conn.execute(f"INSERT INTO {table} SELECT g, 0, %s FROM generate_series(1, 30) g",
                         (big,))
    pipeline = _pipeline(pg_dsn, tmp_path).start()
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("UPDATE doc SET n = n + 1 WHERE id <= 5")
            conn.execute("UPDATE docfull SET n = n + 1 WHERE id <= 5")
        dump_id = pipeline.dump(["public.doc", "public.docfull"])
        wait_until(lambda: dump_state(pipeline, dump_id) == "done", 60, "the dump")
        wait_until(lambda: len([e for e in read_events(tmp_path / "out.jsonl")
                                if e["op"] == "update"]) >= 10, 30, "the updates")
    finally:
        pipeline.stop()
    events = read_events(tmp_path / "out.jsonl")
    updates = {e["table"]: e for e in events if e["op"] == "update"}
    assert updates["doc"]["unchanged"] == ["body"] and "body" not in updates["doc"]["after"]
    assert updates["docfull"]["after"]["body"] == big and "unchanged" not in updates["docfull"]
    assert all(e["after"].get("body") is not None for e in events if "after" in e
               and e["table"] == "docfull")
    assert replayed(events) == source_rows(pg_dsn, ["public.doc", "public.docfull"])


def test_dump_of_table_without_primary_key_is_refused(pg_dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE nopk (a int, b text)")
    # captured inserts only (any other keyless table refuses the start: issue 16)
    pipeline = _pipeline(pg_dsn, tmp_path, inserts_only=["public.nopk"]).start()
    try:
        with pytest.raises(DumpRequestError, match=r"(?s)nopk has no primary key.*key_columns"):
            pipeline.dump(["public.nopk"])
        with pytest.raises(DumpRequestError, match=r"unknown table public\.nope"):
            pipeline.dump(["public.nope"])
        assert pipeline.status()["running"], "a bad request must not stop the pipeline"
    finally:
        pipeline.stop()


def test_table_without_primary_key_can_use_named_key(pg_dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE nopk (a int NOT NULL UNIQUE, b text)")
        # its updates and deletes are logged with the key (else the start is refused: issue 16)
        conn.execute("ALTER TABLE nopk REPLICA IDENTITY USING INDEX nopk_a_key")
        conn.execute("INSERT INTO nopk SELECT g, 'b' FROM generate_series(1, 50) g")
    pipeline = _pipeline(pg_dsn, tmp_path, key_columns={"public.nopk": ["a"]}).start()
    try:
        dump_id = pipeline.dump(["public.nopk"])
        wait_until(lambda: dump_state(pipeline, dump_id) == "done", 30, "the dump")
    finally:
        pipeline.stop()
    reads = [e for e in read_events(tmp_path / "out.jsonl") if e["op"] == "read"]
    assert sorted(e["key"][0] for e in reads) == list(range(1, 51))


def test_missing_output_plugin_is_explained(pg_dsn: str, tmp_path: Path) -> None:
    pipeline = _pipeline(pg_dsn, tmp_path, plugin="wal2json_absent")
    with pytest.raises(FatalSourceError, match=r"(?s)not installed.*apt-get install postgresql"):
        pipeline.start()


def test_wal_level_not_logical_is_explained(tmp_path: Path) -> None:
    server = start_postgres({"wal_level": "replica"})
    try:
        pipeline = _pipeline(server.dsn(), tmp_path)
        with pytest.raises(FatalSourceError,
                           match=r"(?s)wal_level is replica.*wal_level = logical"):
            pipeline.start()
    finally:
        server.stop()


def test_unknown_config_key_names_the_key(tmp_path: Path) -> None:
    from dblog.app.config import load_config

    config = tmp_path / "c.yaml"
    config.write_text("source: {type: postgres, dsn: x}\noutputs: [{type: jsonl}]\n"
                      "engine: {chunk_sise: 5}\n")
    with pytest.raises(ConfigError,
                       match=r"engine.chunk_sise: unknown key \(did you mean chunk_size"):
        load_config(config)
    run = subprocess.run([sys.executable, "-m", "dblog", "run", "--config", str(config)],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 2 and "chunk_sise: unknown key" in run.stderr
    config.write_text("source: {type: postgres, dsn: 'host=x', slots: a}\n"  # a parsable dsn
                      "outputs: [{type: jsonl}]\n")
    run = subprocess.run([sys.executable, "-m", "dblog", "check", "--config", str(config)],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 2 and "source: slots: unknown key (did you mean slot?)" in run.stderr


def test_dump_request_on_an_idle_log_is_accepted_without_waiting_for_the_poll(
        pg_dsn: str, tmp_path: Path) -> None:
    """A command (here a dump request) wakes the log reader's poll: with a 30 s poll timeout
    and nothing in the log, the request is still accepted at once."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE wake (id int PRIMARY KEY)")
        conn.execute("INSERT INTO wake SELECT generate_series(1, 5)")
    slot = "wake_" + pg_dsn.rsplit("dbname=", 1)[-1].split()[0].lower()
    settings = EngineSettings(chunk_size=20, poll_timeout_s=30.0, heartbeat_interval_s=600.0)
    pipeline = Pipeline(
        PostgresConnector({"dsn": pg_dsn, "slot": slot, "tables": ["public.wake"]}, "wake"),
        [JsonlOutput({"path": str(tmp_path / "out.jsonl")})],
        state_path=str(tmp_path / "state.json"), settings=settings).start()
    try:
        time.sleep(0.5)  # the engine is now inside a 30 s poll of an idle log
        requested = time.monotonic()
        dump_id = pipeline.dump(["public.wake"], timeout=25.0)
        accepted_s = time.monotonic() - requested
        wait_until(lambda: dump_state(pipeline, dump_id) == "done", 25, "the dump")
        stopping = time.monotonic()
    finally:
        pipeline.stop()
    stopped_s = time.monotonic() - stopping
    assert accepted_s < 5.0, f"the dump request waited {accepted_s:.1f}s for the poll"
    assert stopped_s < 5.0, f"stop waited {stopped_s:.1f}s for the poll"
    events = read_events(tmp_path / "out.jsonl")
    assert sorted(e["key"][0] for e in events if e["op"] == "read") == [1, 2, 3, 4, 5]
