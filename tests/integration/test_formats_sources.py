"""debezium-json and canal-json from real sources (PostgreSQL, MariaDB): a pipeline writes every
column type of the type tests, dumps, updates (a TOAST update on PostgreSQL), key changes,
deletes and a truncate into jsonl files in each format, and the reference consumers (written
from Debezium's and Canal's published definitions) rebuild every table equal to the source.
A PostgreSQL table under REPLICA IDENTITY DEFAULT stops a debezium-json output with the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from dblog.app.pipeline import Pipeline
from dblog.core.model import TableId, TableInfo
from dblog.engine import EngineSettings
from dblog.errors import FatalOutputError
from dblog.formats.canal import CanalFormat
from dblog.formats.changelog import ChangelogFormat
from dblog.formats.debezium import DebeziumFormat
from dblog.outputs.jsonl import JsonlOutput
from tests.changelog_consumers import (
    CanalConsumer,
    Ddl,
    DebeziumConsumer,
    apply_lines,
    debezium_expected,
    differences,
)

from . import test_mysql, test_postgres_types
from .pgutil import wait_until
from .sources import Kit, kit

pytestmark = pytest.mark.integration
__all__ = ["kit"]

BIG = "(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 400))"


def _create(kit: Kit) -> list[str]:
    if kit.kind == "postgres":
        kit.execute("CREATE TYPE mood AS ENUM ('sad', 'happy')")
        kit.execute(f"CREATE TABLE alltypes ({test_postgres_types.COLUMNS})")
        rows = test_postgres_types.ROWS
        big = BIG
    else:
        kit.execute(f"CREATE TABLE alltypes ({test_mysql.TYPES})")
        rows = test_mysql.TYPE_ROWS
        big = "REPEAT(MD5(RAND()), 400)"
    kit.execute("CREATE TABLE items (id int PRIMARY KEY, v varchar(20), big text)")
    kit.execute("CREATE TABLE gone (id int PRIMARY KEY, v int)")
    names = ["alltypes", "items", "gone"]
    if kit.kind == "postgres":
        for name in names:
            kit.execute(f"ALTER TABLE {name} REPLICA IDENTITY FULL")
    kit.execute(f"INSERT INTO alltypes VALUES {', '.join(rows)}")
    for key in (1, 2, 3):
        kit.execute(f"INSERT INTO items VALUES ({key}, 'v{key}', {big})")
    kit.execute("INSERT INTO gone VALUES (1, 1), (2, 2)")
    return [kit.table(n) for n in names]


def _changes(kit: Kit) -> None:
    """Updates of every column type (full old rows), a TOAST update, a key change, deletes,
    a truncate and an insert after it."""
    if kit.kind == "postgres":
        kit.execute("UPDATE alltypes SET i2 = 7, t = 'changed' WHERE id = 1")
    else:
        kit.execute("UPDATE alltypes SET ti = 7, vc = 'changed' WHERE id = 1")
    kit.execute("UPDATE items SET v = 'toast kept' WHERE id = 1")
    kit.execute("UPDATE items SET id = 10 WHERE id = 2")
    kit.execute("DELETE FROM items WHERE id = 3")
    kit.execute("DELETE FROM alltypes WHERE id = 2")
    kit.execute("TRUNCATE gone")
    kit.execute("INSERT INTO gone VALUES (7, 7)")


def _run(kit: Kit, tmp: Path, tables: list[str], formats: dict[str, ChangelogFormat],
         changes: Callable[[Kit], None] = _changes) -> None:
    outputs = []
    for name, fmt in formats.items():
        output = JsonlOutput({"path": str(tmp / f"{name}.jsonl"), "format": fmt.name})
        output.format = fmt  # the test's options; the engine gives it the source catalog
        outputs.append(output)
    config = {**kit.source_config("formats"), "tables": tables}
    connector: Any
    if kit.kind == "postgres":
        from dblog.connectors.postgres import PostgresConnector

        connector = PostgresConnector(config, "fmt")
    else:
        from dblog.connectors.mysql import MysqlConnector

        connector = MysqlConnector(config, "fmt")
    pipeline = Pipeline(connector, outputs, state_path=str(tmp / "state.json"),
                        settings=EngineSettings(chunk_size=2, flush_interval_s=0.1,
                                                heartbeat_interval_s=0.5)).start()
    try:
        dump_id = pipeline.dump(tables)
        wait_until(lambda: (pipeline.dump_status(dump_id) or {}).get("state") == "done", 60,
                   "the dump")
        changes(kit)
        target = kit.current_position()

        def caught_up() -> bool:
            position = pipeline.status()["committed_position"]
            return position is not None and kit.parse_position(position) >= target

        wait_until(caught_up, 60, "the stream to catch up")
    finally:
        pipeline.stop()


def _catalog(kit: Kit, tables: list[str]) -> dict[TableId, TableInfo]:
    """The tables' metadata, for the consumers' DDL (the pipeline gets its own from the
    engine's table catalog)."""
    reader = kit.chunk_reader()
    try:
        return {TableId.parse(t): reader.table_info(TableId.parse(t)) for t in tables}
    finally:
        reader.close()


def _ddl(kit: Kit, catalog: dict[TableId, TableInfo]) -> Ddl:
    family = "postgresql" if kit.kind == "postgres" else "mysql"
    return Ddl(family, {(t.schema, t.name): ({c.name: c.type_name for c in info.columns},
                                            info.key_columns) for t, info in catalog.items()})


def test_both_formats_rebuild_every_table_from_a_real_source(kit: Kit, tmp_path: Path) -> None:
    tables = _create(kit)
    formats: dict[str, ChangelogFormat] = {"debezium": DebeziumFormat(), "canal": CanalFormat()}
    _run(kit, tmp_path, tables, formats)
    ddl = _ddl(kit, _catalog(kit, tables))
    source = kit.source_rows(tables)
    keys = sorted((t[1], k) for t, k in source)
    assert [k for k in keys if k[0] != "alltypes"] == [("gone", (7,)), ("items", (1,)),
                                                       ("items", (10,))], keys
    debezium = DebeziumConsumer(ddl)
    apply_lines(debezium, (tmp_path / "debezium.jsonl").read_bytes().splitlines())
    expected = {k: debezium_expected(ddl.family, ddl.tables[k[0]][0], row)
                for k, row in source.items()}
    assert differences(debezium.rows, expected) == []
    assert {op: debezium.ops.get(op, 0) > 0 for op in "crudt"} == dict.fromkeys("crudt", True)
    canal = CanalConsumer(ddl.family)
    apply_lines(canal, (tmp_path / "canal.jsonl").read_bytes().splitlines())
    assert differences(canal.rows, source) == []
    assert set(canal.types) == {"INSERT", "UPDATE", "DELETE", "TRUNCATE"}
    toast = _items_update(tmp_path / "debezium.jsonl")
    assert toast["before"] is not None and toast["after"] is not None
    assert len(toast["after"]["big"]) == 12800 and toast["after"]["v"] == "toast kept"
    assert toast["before"]["big"] == toast["after"]["big"]


def _items_update(path: Path) -> dict[str, Any]:
    for line in path.read_bytes().splitlines():
        document = orjson.loads(line)
        if document["op"] == "u" and document["source"]["table"] == "items":
            return dict(document)
    raise AssertionError("no update of items")


def test_replica_identity_default_stops_a_debezium_output_with_the_fix(
        pg_dsn: str, tmp_path: Path) -> None:
    pg = Kit("postgres", pg_dsn)
    pg.execute("CREATE TABLE plain (id int PRIMARY KEY, v text)")
    pg.execute("INSERT INTO plain VALUES (1, 'a')")
    tables = [pg.table("plain")]
    with pytest.raises(FatalOutputError) as caught:
        _run(pg, tmp_path, tables, {"debezium": DebeziumFormat()},
             lambda kit: kit.execute("UPDATE plain SET v = 'b' WHERE id = 1"))
    assert "public.plain" in caught.value.message
    assert caught.value.fix is not None
    assert "ALTER TABLE public.plain REPLICA IDENTITY FULL" in caught.value.fix


def test_as_logged_under_replica_identity_default_emits_what_postgres_logged(
        pg_dsn: str, tmp_path: Path) -> None:
    """The documented limitation: updates without a before image, TOAST columns left out of
    the after image (``unchanged_columns: omit``), deletes with the key columns only."""
    pg = Kit("postgres", pg_dsn)
    pg.execute("CREATE TABLE plain (id int PRIMARY KEY, v text, big text)")
    pg.execute(f"INSERT INTO plain VALUES (1, 'a', {BIG}), (2, 'b', 'small')")

    def changes(kit: Kit) -> None:
        kit.execute("UPDATE plain SET v = 'kept big' WHERE id = 1")
        kit.execute("DELETE FROM plain WHERE id = 2")

    fmt = DebeziumFormat(before_image="as-logged", unchanged_columns="omit")
    _run(pg, tmp_path, [pg.table("plain")], {"debezium": fmt}, changes)
    documents = [orjson.loads(line) for line in
                 (tmp_path / "debezium.jsonl").read_bytes().splitlines()]
    update = next(d for d in documents if d["op"] == "u")
    assert update["before"] is None and update["after"] == {"id": 1, "v": "kept big"}
    delete = next(d for d in documents if d["op"] == "d")
    assert delete["before"] == {"id": 2} and delete["after"] is None
