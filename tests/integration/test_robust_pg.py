"""Issue 16 on a real PostgreSQL: no dump request stops the pipeline, names with quotes,
backslashes, spaces and non-ASCII characters work on both paths (dump and log)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from dblog.app.pipeline import Pipeline
from dblog.connectors.postgres import PostgresConnector
from dblog.engine import EngineSettings
from dblog.errors import DumpRequestError
from dblog.outputs.jsonl import JsonlOutput

from .pgutil import (
    dump_state,
    read_events,
    read_keys,
    replayed,
    source_rows,
    stored_dump_ids,
    wait_for_deletes,
    wait_until,
)

pytestmark = pytest.mark.integration


def pipeline_for(dsn: str, tmp: Path, tables: list[str] | None = None,
                 **source: Any) -> Pipeline:
    slot = "robust_" + dsn.rsplit("dbname=", 1)[-1].split()[0].lower()
    config = {"dsn": dsn, "slot": slot, "tables": tables or ["public.*"], **source}
    settings = EngineSettings(chunk_size=7, flush_interval_s=0.1, heartbeat_interval_s=0.5,
                              poll_timeout_s=0.05)
    return Pipeline(PostgresConnector(config, "robust"),
                    [JsonlOutput({"path": str(tmp / "out.jsonl")})],
                    state_path=str(tmp / "state.json"), settings=settings)


def wait_done(pipeline: Pipeline, dump_id: str, timeout: float = 60) -> None:
    wait_until(lambda: dump_state(pipeline, dump_id) == "done", timeout, f"dump {dump_id}")


def execute(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement.encode())  # test statements, composed here


BAD_KEYS: list[tuple[str, Any, str]] = [
    ("public.t1", [[2**70]], "out of range"),
    ("public.t1", [[2**31]], "out of range"),
    ("public.t1", [["abc"]], "invalid input syntax"),
    ("public.t1", [[1.5]], "invalid input syntax"),
    ("public.t1", [[True]], "invalid input syntax"),
    ("public.t1", [[1, 2]], "has 1 value"),
    ("public.t1", [1, 2], "a list of keys"),
    ("public.tu", [["not-a-uuid"]], "uuid"),
    ("public.tt", [["a\x00b", 1]], "NUL"),
    ("public.tt", [["a", "x"]], "invalid input syntax"),
    ("public.nope", [[1]], "unknown table"),
]


def test_requests_are_checked_against_the_key_types_and_fail_alone(
        pg_dsn: str, tmp_path: Path) -> None:
    execute(pg_dsn,
            "CREATE TABLE t1 (id int PRIMARY KEY, v text)",
            "INSERT INTO t1 SELECT g, 'v' || g FROM generate_series(1, 30) g",
            "CREATE TABLE tu (u uuid PRIMARY KEY)",
            "INSERT INTO tu VALUES ('00000000-0000-0000-0000-000000000001')",
            "CREATE TABLE tt (a text, b int, PRIMARY KEY (a, b))",
            "INSERT INTO tt VALUES ('a', 1), ('b', 2)")
    pipeline = pipeline_for(pg_dsn, tmp_path).start()
    try:
        for bad in ([None], [123], ["public."], "public.t1"):
            with pytest.raises(DumpRequestError):
                pipeline.dump(bad)  # type: ignore[arg-type]  # what a caller may pass
        for table, keys, reason in BAD_KEYS:
            with pytest.raises(DumpRequestError) as rejected:
                pipeline.dump_keys(table, keys)
            assert reason in rejected.value.message, (table, keys, rejected.value.message)
        assert pipeline.is_running()
        good = [pipeline.dump_keys("public.t1", [[3], ["4"], [2**31 - 1]]),
                pipeline.dump_keys("public.tu", [["00000000-0000-0000-0000-000000000001"]]),
                pipeline.dump_keys("public.tt", [["b", 2], ["a", "1"]])]
        for dump_id in good:
            wait_done(pipeline, dump_id)
        execute(pg_dsn, "INSERT INTO t1 VALUES (100, 'after')")
        wait_until(lambda: any(e.get("key") == [100] for e in read_events(tmp_path / "out.jsonl")),
                   60, "the insert made after the rejections")
    finally:
        pipeline.stop()
    assert stored_dump_ids(tmp_path / "state.json") == good  # nothing else
    assert read_keys(tmp_path / "out.jsonl") == [
        ("t1", (3,)), ("t1", (4,)), ("tt", ("a", 1)), ("tt", ("b", 2)),
                     ("tu", ("00000000-0000-0000-0000-000000000001",))]


WEIRD = ['a"b', "c\\d", "e f", "ünï", "g'h", "x.y", "t\tab", "Big"]


def test_tables_and_columns_with_quotes_backslashes_spaces_and_unicode(
        pg_dsn: str, tmp_path: Path) -> None:
    """Both paths: the dump reads every row and the log delivers every change, for names
    listed exactly in ``tables`` and matched by a pattern."""
    names = [f"tbl {w}" for w in WEIRD]
    for name in names:
        quoted = '"' + name.replace('"', '""') + '"'
        columns = ", ".join('"' + w.replace('"', '""') + '" int' for w in WEIRD)
        execute(pg_dsn, f"CREATE TABLE {quoted} (id int PRIMARY KEY, {columns})",
                f"INSERT INTO {quoted} SELECT g{', g' * len(WEIRD)} "
                "FROM generate_series(1, 20) g")
    exact = [f"public.{n}" for n in names]
    pipeline = pipeline_for(pg_dsn, tmp_path, tables=exact).start()
    try:
        dump_id = pipeline.dump(exact)
        wait_until(lambda: dump_state(pipeline, dump_id) == "done", 120, "the dump")
        for name in names:
            quoted = '"' + name.replace('"', '""') + '"'
            execute(pg_dsn, f"INSERT INTO {quoted} (id) VALUES (1000)",
                    f"UPDATE {quoted} SET \"a\"\"b\" = -1 WHERE id = 2",
                    f"DELETE FROM {quoted} WHERE id = 3")
        wait_for_deletes(tmp_path / "out.jsonl", names)
    finally:
        pipeline.stop()
    events = read_events(tmp_path / "out.jsonl")
    assert replayed(events) == source_rows(pg_dsn, exact)
