"""Helpers for PostgreSQL integration tests: source snapshots, stream checks (I1-I3)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson
import psycopg

from dblog.app.pipeline import Pipeline
from dblog.connectors.postgres.chunks import PostgresChunkReader
from dblog.connectors.postgres.positions import Lsn
from dblog.core.model import EncodedRow, TableId
from dblog.state import FileStateStore, state_from_json
from dblog.testing import replay


def source_rows(dsn: str, tables: Iterable[str]) -> dict[Any, dict[str, Any]]:
    """Every row of ``tables`` in the canonical form the connector emits, keyed like replay()."""
    reader = PostgresChunkReader(dsn, [], {})
    try:
        out: dict[Any, dict[str, Any]] = {}
        for name in tables:
            info = reader.table_info(TableId.parse(name))
            for key, row in reader.read_chunk(info, None, None, 10**9).rows:
                image = row.decode() if isinstance(row, EncodedRow) else row
                out[((info.table.schema, info.table.name), key)] = image
        return out
    finally:
        reader.close()


def read_events(path: str | Path) -> list[dict[str, Any]]:
    with open(path, "rb") as handle:
        return [orjson.loads(line) for line in handle]


def normalise(store: dict[Any, dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    return {(table, tuple(key)): row for (table, key), row in store.items()}


def current_lsn(dsn: str) -> Lsn:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        return Lsn.parse(row[0])


def dump_state(pipeline: Pipeline, dump_id: str) -> str:
    """The state of a dump the pipeline knows; an unknown id fails the test at once (it is
    not a state to wait out)."""
    status = pipeline.dump_status(dump_id)
    assert status is not None, f"the pipeline does not know dump {dump_id}"
    state: str = status["state"]
    return state


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def wait_for_deletes(path: Path, tables: Iterable[str], timeout: float = 60) -> None:
    """Until the JSON-lines file at ``path`` holds a delete of each of ``tables`` (names)."""
    names = set(tables)

    def all_deleted() -> bool:
        return {e["table"] for e in read_events(path) if e["op"] == "delete"} == names

    wait_until(all_deleted, timeout, "the log changes of every table")


def stored_dump_ids(state: Path) -> list[str]:
    """The ids of the dumps the file state at ``state`` holds."""
    stored = FileStateStore(state).load()
    assert stored is not None
    return [d.id for d in state_from_json(stored.data).dumps.dumps]


def read_keys(path: Path) -> list[tuple[str, tuple[Any, ...]]]:
    """(table, key) of every dump row in the JSON-lines file at ``path``, sorted."""
    return sorted((e["table"], tuple(e["key"])) for e in read_events(path) if e["op"] == "read")


def check_commit_order(events: list[dict[str, Any]],
                       parse: Callable[[str], Any] = Lsn.parse) -> int:
    """I1: transactions arrive whole, in commit (LSN) order; returns how many were checked.
    ``parse`` reads the source's positions (LSN by default)."""
    last_commit: Any = None
    open_tx: int | None = None
    count = 0
    for event in events:
        op = event["op"]
        if op == "begin":
            assert open_tx is None, f"BEGIN inside transaction {open_tx}: {event}"
            open_tx = event["txid"]
        elif op == "commit":
            assert open_tx == event["txid"], f"COMMIT of {event['txid']} inside {open_tx}"
            commit = parse(event["pos"])
            assert last_commit is None or commit > last_commit, \
                f"commit {event['pos']} not after the previous one"
            last_commit, open_tx = commit, None
            count += 1
        elif op == "read":
            assert open_tx is None, f"read event inside transaction {open_tx}: {event}"
        else:
            assert open_tx == event["txid"], f"change outside its transaction: {event}"
    return count


def check_no_time_travel(events: list[dict[str, Any]], version_col: str = "ver") -> int:
    """I2: per key, versions never go back, and no read resurrects a key deleted later in the
    source history. Rows carry a ``ver`` column from one increasing sequence."""
    latest: dict[Any, tuple[int, bool]] = {}  # key -> (highest version seen, deleted)
    reads = 0
    for event in events:
        op = event["op"]
        if op in ("begin", "commit"):
            continue
        table = (event["schema"], event["table"])
        if op == "truncate":
            latest = {k: v for k, v in latest.items() if k[0] != table}
            continue
        key = (table, tuple(event["key"]))
        if event.get("old_key") is not None:
            old = (table, tuple(event["old_key"]))
            latest[old] = (latest.get(old, (0, False))[0], True)
        seen, deleted = latest.get(key, (0, False))
        if op == "delete":
            latest[key] = (seen, True)
            continue
        version = int(event["after"][version_col])
        if op == "read":
            reads += 1
            assert not deleted, f"read of {key} after its delete: {event}"
            assert version >= seen, f"read of {key} at version {version} after version {seen}"
        else:
            assert version >= seen, f"{op} of {key} went back from {seen} to {version}"
        latest[key] = (max(seen, version), False)
    return reads


def replayed(events: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    return normalise(replay(events))
