"""Changelog formats across schema changes on a PostgreSQL source, which logs no schema events:
a column added or retyped while the pipeline runs, and a backlog that crosses an ALTER TABLE
made while dblog was stopped (columns added and dropped), keep the output going with every
row's values mapped by their column's type (the type each value was logged under)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from dblog.formats.canal import CanalFormat
from dblog.formats.changelog import ChangelogFormat
from dblog.formats.debezium import DebeziumFormat

from .sources import Kit
from .test_formats_sources import _run

pytestmark = pytest.mark.integration


def _documents(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _while_running(pg_dsn: str, tmp_path: Path, table: str, row: str,
                   statements: list[str], formats: dict[str, ChangelogFormat] | None = None
                   ) -> list[dict[str, Any]]:
    """The debezium-json documents of a pipeline that dumps ``table`` (one ``row``, REPLICA
    IDENTITY FULL), then captures ``statements`` run while it streams (other ``formats``:
    their files are beside it)."""
    pg = Kit("postgres", pg_dsn)
    name = table.split(" ")[0]
    pg.execute(f"CREATE TABLE {table}")
    pg.execute(f"ALTER TABLE {name} REPLICA IDENTITY FULL")
    pg.execute(f"INSERT INTO {name} VALUES {row}")

    def changes(kit: Kit) -> None:
        for statement in statements:
            kit.execute(statement)

    _run(pg, tmp_path, [pg.table(name)], formats or {"debezium": DebeziumFormat()}, changes)
    return _documents(tmp_path / "debezium.jsonl")


def test_a_column_added_while_the_pipeline_runs_is_mapped_by_its_type(
        pg_dsn: str, tmp_path: Path) -> None:
    documents = _while_running(pg_dsn, tmp_path, "grows (id int PRIMARY KEY, v text)",
                               "(1, 'a')", [
        "UPDATE grows SET v = 'b' WHERE id = 1",
        "ALTER TABLE grows ADD COLUMN at timestamptz",
        "INSERT INTO grows VALUES (2, 'c', '2024-05-01 12:00:00+00')",
        "UPDATE grows SET v = 'd' WHERE id = 1"])
    assert [(d["op"], (d["after"] or {}).get("id")) for d in documents] == [
        ("r", 1), ("u", 1), ("c", 2), ("u", 1)]
    assert documents[2]["after"] == {"id": 2, "v": "c", "at": "2024-05-01T12:00:00Z"}
    assert documents[3]["before"] == {"id": 1, "v": "b", "at": None}
    assert documents[3]["after"] == {"id": 1, "v": "d", "at": None}


def test_a_backlog_across_added_and_dropped_columns_goes_out_as_logged(
        pg_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pg = Kit("postgres", pg_dsn)
    pg.execute("CREATE TABLE shifts (id int PRIMARY KEY, v text, w int)")
    pg.execute("ALTER TABLE shifts REPLICA IDENTITY FULL")
    pg.execute("INSERT INTO shifts VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 3)")
    tables = [pg.table("shifts")]
    _run(pg, tmp_path, tables, {"debezium": DebeziumFormat()}, lambda kit: None)
    pg.execute("UPDATE shifts SET w = 10 WHERE id = 1")  # logged while dblog is stopped
    pg.execute("DELETE FROM shifts WHERE id = 2")
    pg.execute("ALTER TABLE shifts ADD COLUMN n int, DROP COLUMN v")
    pg.execute("UPDATE shifts SET n = 5 WHERE id = 3")
    pg.execute("INSERT INTO shifts VALUES (4, 4, 44)")
    _run(pg, tmp_path, tables, {"debezium": DebeziumFormat()}, lambda kit: None)
    logged = [d for d in _documents(tmp_path / "debezium.jsonl") if d["op"] != "r"]
    assert [(d["op"], d["before"], d["after"]) for d in logged] == [
        ("u", {"id": 1, "v": "a", "w": 1}, {"id": 1, "v": "a", "w": 10}),
        ("d", {"id": 2, "v": "b", "w": 2}, None),
        ("u", {"id": 3, "w": 3, "n": None}, {"id": 3, "w": 3, "n": 5}),
        ("c", None, {"id": 4, "w": 4, "n": 44})]
    warned = [r.getMessage() for r in caplog.records if "no longer in the source" in r.getMessage()]
    assert len(warned) == 1 and "['v']" in warned[0] and "public.shifts" in warned[0]


def test_a_column_retyped_while_the_pipeline_runs_keeps_the_output_going(
        pg_dsn: str, tmp_path: Path) -> None:
    documents = _while_running(pg_dsn, tmp_path, "retyped (id int PRIMARY KEY, at timestamptz)",
                               "(1, '2024-05-01 12:00:00+00')", [
        "ALTER TABLE retyped ALTER COLUMN at TYPE text",
        "INSERT INTO retyped VALUES (2, 'soon')"])
    assert [(d["op"], d["after"]) for d in documents] == [
        ("r", {"id": 1, "at": "2024-05-01T12:00:00Z"}), ("c", {"id": 2, "at": "soon"})]


def test_columns_retyped_while_the_pipeline_runs_are_mapped_by_their_new_types(
        pg_dsn: str, tmp_path: Path) -> None:
    """New-type values that fit the old type (a timestamp is text, 8 an integer) were mapped
    by the old type until a restart; wal2json logs each value's type, which the formats follow."""
    documents = _while_running(
        pg_dsn, tmp_path, "retypes (id int PRIMARY KEY, at text, n int)",
        "(1, '2024-05-01 12:00:00+00', 7)", [
            "ALTER TABLE retypes ALTER COLUMN at TYPE timestamptz USING at::timestamptz, "
            "ALTER COLUMN n TYPE numeric",
            "INSERT INTO retypes VALUES (2, '2024-05-01 14:00:00+02', 8)",
            "UPDATE retypes SET n = 9 WHERE id = 1"],
        {"debezium": DebeziumFormat(), "canal": CanalFormat()})
    new = {"id": 2, "at": "2024-05-01T12:00:00Z", "n": "8"}
    assert [(d["op"], d["before"], d["after"]) for d in documents] == [
        ("r", None, {"id": 1, "at": "2024-05-01 12:00:00+00", "n": 7}), ("c", None, new),
        ("u", {"id": 1, "at": "2024-05-01T12:00:00Z", "n": "7"},
         {"id": 1, "at": "2024-05-01T12:00:00Z", "n": "9"})]
    canal = _documents(tmp_path / "canal.jsonl")
    assert [(c["type"], c["data"], c["old"]) for c in canal[1:]] == [
        ("INSERT", [{"id": "2", "at": "2024-05-01 12:00:00", "n": "8"}], None),
        ("UPDATE", [{"id": "1", "at": "2024-05-01 12:00:00", "n": "9"}], [{"n": "7"}])]
    assert [(c["mysqlType"], c["sqlType"]) for c in canal] == [
        ({"id": "integer", "at": "text", "n": "integer"}, {"id": 4, "at": 12, "n": 4}),
        *[({"id": "integer", "at": "timestamp with time zone", "n": "numeric"},
           {"id": 4, "at": 2014, "n": 2})] * 2]
