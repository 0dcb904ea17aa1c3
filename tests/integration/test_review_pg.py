"""Review findings on PostgreSQL: each test demonstrates a bug (they fail on the reviewed code)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from dblog.app.pipeline import Pipeline
from dblog.connectors.postgres import PostgresConnector
from dblog.connectors.postgres.chunks import connect
from dblog.core.model import ChangeEvent, LogItem, Op
from dblog.engine import EngineSettings
from dblog.errors import DblogError, FatalSourceError
from dblog.outputs.jsonl import JsonlOutput

from .pgutil import read_events, wait_until

pytestmark = pytest.mark.integration


def _dsn_parts(dsn: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in dsn.split())


def _with(dsn: str, **changes: str) -> str:
    parts = _dsn_parts(dsn)
    parts.update(changes)
    return " ".join(f"{k}={v}" for k, v in parts.items())


_PROXY = r"""
import socket, sys, threading
target = (sys.argv[1], int(sys.argv[2]))
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen()
print(listener.getsockname()[1], flush=True)

def pump(src, dst):
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass

while True:
    client, _ = listener.accept()
    server = socket.create_connection(target)
    for a, b in ((client, server), (server, client)):
        threading.Thread(target=pump, args=(a, b), daemon=True).start()
"""


class _Proxy:
    """A TCP forwarder in a child process (libpq's blocking connect holds the GIL); killing it
    cuts the connections without an error message from the server: a network failure."""

    def __init__(self, host: str, port: int) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", _PROXY, host, str(port)],
                                        stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.port = int(self.process.stdout.readline())

    def cut(self) -> None:
        self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:  # else a ResourceWarning in whichever test collects it
            self.process.stdout.close()

    close = cut


def _poll_until(reader: Any, want: int, timeout: float = 20) -> list[LogItem]:
    items: list[LogItem] = []
    deadline = time.monotonic() + timeout
    while len(items) < want and time.monotonic() < deadline:
        items.extend(reader.poll(0.2))
    return items


def _poll_for_updates(reader: Any, want: int, timeout: float = 20) -> list[LogItem]:
    """Poll until ``want`` update events (and their transactions' commits) have arrived."""
    items: list[LogItem] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items.extend(reader.poll(0.2))
        updates = sum(1 for i in items if isinstance(i, ChangeEvent) and i.op is Op.UPDATE)
        if updates >= want and isinstance(items[-1], ChangeEvent) \
                and items[-1].op is Op.COMMIT:
            break
    return items


def test_replication_connection_loss_is_a_retryable_dblog_error(pg_dsn: str) -> None:
    """replication.PostgresLogReader.poll: psycopg's pq layer raises psycopg.OperationalError
    itself from consume_input()/get_copy_data() (-2) and put_copy_data()/flush(); these escape
    unclassified, so Pipeline.run (which retries only DblogError) stops for good on a network
    blip instead of restarting from the committed state."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    parts = _dsn_parts(pg_dsn)
    proxy = _Proxy(parts.get("host", "127.0.0.1"), int(parts.get("port", "5432")))
    connector = PostgresConnector({"dsn": pg_dsn, "slot": "blip", "tables": ["public.t"]}, "r")
    connector.prepare()
    reader = connector.log_reader()
    reader.dsn = _with(pg_dsn, host="127.0.0.1", port=str(proxy.port))
    try:
        reader.start(None)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO t VALUES (1, 'a')")
        assert _poll_until(reader, 3), "the insert should stream through the proxy"
        proxy.cut()
        with pytest.raises(Exception) as raised:
            for _ in range(50):
                reader.poll(0.1)
        assert isinstance(raised.value, DblogError) and raised.value.retryable, (
            f"a lost replication connection raised {type(raised.value).__module__}."
            f"{type(raised.value).__name__}: {raised.value}")
    finally:
        reader.close()
        proxy.close()
        connector.close()


def test_truncate_of_a_table_not_seen_yet_is_streamed(pg_dsn: str, tmp_path: Path) -> None:
    """wal2json.Wal2JsonDecoder._meta: wal2json's TRUNCATE message has no "pk", so the table's
    key columns are cached as () and _key_getter(()) calls itemgetter() with no argument:
    TypeError. Any TRUNCATE of a table the decoder has not seen a row event of since start
    kills the pipeline, and after a restart from a position before it, again (crash loop)."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO t VALUES (1, 'a')")
    settings = EngineSettings(chunk_size=20, flush_interval_s=0.2, heartbeat_interval_s=0.5)
    pipeline = Pipeline(PostgresConnector({"dsn": pg_dsn, "slot": "trunc",
                                           "tables": ["public.t"]}, "trunc"),
                        [JsonlOutput({"path": str(tmp_path / "out.jsonl")})],
                        state_path=str(tmp_path / "state.json"), settings=settings).start()
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("TRUNCATE t")
            conn.execute("INSERT INTO t VALUES (2, 'b')")

        def streamed() -> bool:
            pipeline.status()  # raises the error that stopped the pipeline
            path = tmp_path / "out.jsonl"
            return path.exists() and any(e["op"] == "insert" for e in read_events(path))

        wait_until(streamed, 30, "the TRUNCATE and the insert after it")
    finally:
        with contextlib.suppress(Exception):  # the error, if any, was raised above
            pipeline.stop()
    events = [e for e in read_events(tmp_path / "out.jsonl")
              if e["op"] not in ("begin", "commit")]
    assert [e["op"] for e in events] == ["truncate", "insert"]
    assert events[1]["key"] == [2]


def test_unchanged_toast_column_after_add_column_is_marked(pg_dsn: str) -> None:
    """wal2json._row_event/_complete_toast (counts, not names): after ALTER TABLE ADD COLUMN,
    an update that leaves a TOASTed column unchanged arrives with as many columns as before,
    and is emitted as a complete row without that column and without marking it unchanged."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, big text)")
        conn.execute("ALTER TABLE t ALTER COLUMN big SET STORAGE EXTERNAL")
        conn.execute("INSERT INTO t SELECT 1, string_agg(md5(g::text), '') "
                     "FROM generate_series(1, 400) g")
    connector = PostgresConnector({"dsn": pg_dsn, "slot": "toast", "tables": ["public.t"]}, "x")
    connector.prepare()
    reader = connector.log_reader()
    try:
        reader.start(None)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("UPDATE t SET big = big || 'x' WHERE id = 1")  # full row: count known
            items = _poll_for_updates(reader, 1)  # decoded (columns cached) before the DDL
            conn.execute("ALTER TABLE t ADD COLUMN c int")
            conn.execute("UPDATE t SET c = 5 WHERE id = 1")  # big unchanged (TOAST)
        # counted in updates: the watermark row prepare() inserted also reaches this reader, so
        # counting items could stop one transaction short
        items += _poll_for_updates(reader, 1)
        updates = [i for i in items if isinstance(i, ChangeEvent) and i.op is Op.UPDATE]
        assert len(updates) == 2, items
        last = updates[1]
        assert isinstance(last.after, dict)
        assert "big" in last.after or last.unchanged == ("big",), (
            f"partial row passed off as complete: columns {sorted(last.after)}, "
            f"unchanged {last.unchanged}")
    finally:
        reader.close()
        connector.close()


def test_unknown_database_is_a_fatal_error(pg_dsn: str) -> None:
    """errors.classify: 'database "x" does not exist' is a psycopg.OperationalError without the
    word "role", so it is classified retryable: a typo in source.dsn is retried (Pipeline:
    20 restarts with up to 30 s backoff) instead of stopping at once with the fix."""
    with pytest.raises(DblogError) as raised:
        connect(_with(pg_dsn, dbname="no_such_db_review")).close()
    assert isinstance(raised.value, FatalSourceError), repr(raised.value)
