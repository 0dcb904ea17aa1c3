"""Issue 16 on a real MariaDB: table and column names with quotes, backslashes, spaces, dots,
tabs and non-ASCII characters work on both paths (the dump reads every row, the log delivers
every change), for names listed exactly in ``tables`` and matched by a pattern."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from dblog.app.pipeline import Pipeline
from dblog.engine import EngineSettings
from dblog.outputs.jsonl import JsonlOutput

from .pgutil import dump_state, read_events, replayed, wait_for_deletes, wait_until
from .sources import Kit

pytestmark = pytest.mark.integration

WEIRD = ['a"b', "c\\d", "e f", "ünï", "g'h", "x.y", "t\tab", "Big", "a`b"]


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _pipeline(kit: Kit, tmp: Path, tables: list[str]) -> Pipeline:
    from dblog.connectors.mysql import MysqlConnector

    server_id = 5000 + zlib.crc32(kit.dsn.encode()) % 1_000_000
    config = {"type": "mariadb", "dsn": kit.dsn, "server_id": server_id, "tables": tables}
    settings = EngineSettings(chunk_size=7, flush_interval_s=0.1, heartbeat_interval_s=0.5,
                              poll_timeout_s=0.05)
    return Pipeline(MysqlConnector(config, "robust-names"),
                    [JsonlOutput({"path": str(tmp / "out.jsonl")})],
                    state_path=str(tmp / "state.json"), settings=settings)


@pytest.mark.parametrize("listed", ["exact", "pattern"])
def test_tables_and_columns_with_quotes_backslashes_spaces_and_unicode(
        maria_dsn: str, tmp_path: Path, listed: str) -> None:
    kit = Kit("mariadb", maria_dsn)
    names = [f"tbl {w}" for w in WEIRD]
    columns = ", ".join(f"{quoted(w)} int" for w in WEIRD)
    for name in names:
        kit.execute(f"CREATE TABLE {quoted(name)} (id int PRIMARY KEY, {columns})")
        kit.execute(f"INSERT INTO {quoted(name)} SELECT seq{', seq' * len(WEIRD)} "
                    "FROM seq_1_to_20")
    exact = [f"{kit.schema}.{n}" for n in names]
    pipeline = _pipeline(kit, tmp_path, exact if listed == "exact" else [kit.table("*")])
    pipeline.start()
    try:
        dump_id = pipeline.dump(exact)
        wait_until(lambda: dump_state(pipeline, dump_id) == "done", 120, "the dump")
        for name in names:
            kit.execute(f"INSERT INTO {quoted(name)} (id) VALUES (1000)")
            kit.execute(f"UPDATE {quoted(name)} SET {quoted(WEIRD[0])} = -1 WHERE id = 2")
            kit.execute(f"DELETE FROM {quoted(name)} WHERE id = 3")
        wait_for_deletes(tmp_path / "out.jsonl", names)
    finally:
        pipeline.stop()
    events = read_events(tmp_path / "out.jsonl")
    assert {e["table"] for e in events if e["op"] == "read"} == set(names)
    assert replayed(events) == kit.source_rows(exact)
    updated = [e for e in events if e["op"] == "update"]
    assert all(e["after"][WEIRD[0]] == -1 for e in updated) and len(updated) == len(names)
