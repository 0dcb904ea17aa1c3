"""Type parity on MariaDB: for every row, the dump's read event, the log's insert, update and
delete carry the same key, and the same values where the row did not change (issue 15).

Covers MariaDB's own UUID, INET4 and INET6 types as primary keys and as plain columns, JSON
documents with duplicate keys and non-ASCII text (on the server-encoded dump path too), dates
with a zero part, the zero TIMESTAMP, and spatial columns (hex of the stored value).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dblog.app.pipeline import Pipeline
from dblog.engine import EngineSettings
from dblog.outputs.jsonl import JsonlOutput

from .pgutil import dump_state, read_events, replayed, wait_until
from .sources import Kit
from .workload import maria_connect

pytestmark = pytest.mark.integration

KEY_TABLES = {
    "k_uuid": ("uuid", ["'aafa4db5-e7ab-11f1-8b7e-02fc00000001'", "'00000000-0000-0000-0000-0000"
                        "00000000'", "'FFFFFFFF-FFFF-4FFF-BFFF-FFFFFFFFFFFF'", "uuid()",
                        "'0196b4c2-7a9e-7c4d-9e5b-3f6a1d2c8b90'", "uuid()"]),
    "k_inet4": ("inet4", ["'10.0.0.1'", "'0.0.0.0'", "'255.255.255.255'", "'192.168.1.0'",
                          "'1.0.0.0'", "'0.0.0.1'"]),
    "k_inet6": ("inet6", ["'2001:db8::ff00:42:8329'", "'::'", "'::1'", "'::ffff:1.2.3.4'",
                          "'::1.2.3.4'", "'1:0:2:3:4:5:6:7'", "'fe80::'", "'1::'",
                          "'1:2:3:4:5:6:7:8'", "'1:0:0:2:0:0:0:3'"]),
}

PARITY = """
  id int PRIMARY KEY, v int NOT NULL, u uuid, i4 inet4, i6 inet6, j json, d date, dt datetime,
  dt6 datetime(6), ts timestamp NULL, g point, gg geometry, n varchar(10)
"""
PARITY_ROWS = [
    "(1, 0, 'aafa4db5-e7ab-11f1-8b7e-02fc00000001', '10.0.0.1', '2001:db8::ff00:42:8329', "
    "'{\"k\": [1, 2.50, \"é ü 😀\"], \"k\": 2}', '2024-00-15', '2024-05-00 10:00:00', "
    "'0000-00-00 00:00:00', 0, POINT(1, 2), ST_GeomFromText('LINESTRING(0 0, 1 1)'), 'x')",
    "(2, 0, '00000000-0000-4000-8000-000000000001', '0.0.0.0', '::ffff:1.2.3.4', '[]', "
    "'0000-00-00', '0000-00-00 00:00:00', '2024-01-01 00:00:00.5', '1970-01-01 00:00:01', "
    "NULL, ST_GeomFromText('POLYGON((0 0, 4 0, 4 4, 0 0))', 4326), 'y')",
    "(3, 0, NULL, NULL, NULL, '{\"a\":1,  \"a\" : \"Ωmega\"}', '0000-01-01', "
    "'2024-02-29 23:59:59', '2024-00-00 00:00:00.000001', '2038-01-19 03:14:07', NULL, NULL, "
    "NULL)",
]
# a table whose columns all take the server-side JSON_OBJECT dump path, JSON column included
FAST = "id int PRIMARY KEY, v int NOT NULL, j json, d date, n varchar(10)"
FAST_ROWS = ["(1, 0, '{\"k\": 1, \"k\": \"é\"}', '2024-00-15', 'a')",
             "(2, 0, '[1, 2.50]', '0000-00-00', NULL)", "(3, 0, NULL, '2024-03-01', 'c')"]


def _execute_zero_dates(kit: Kit, statements: list[str]) -> None:
    """Zero dates need a sql_mode without NO_ZERO_DATE / NO_ZERO_IN_DATE."""
    conn = maria_connect(kit.dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")
            for statement in statements:
                cur.execute(statement)
    finally:
        conn.close()


def _pipeline(kit: Kit, tmp: Path, tables: list[str]) -> Pipeline:
    from dblog.connectors.mysql import MysqlConnector

    config = {**kit.source_config("mysqltypes"), "tables": tables}
    settings = EngineSettings(chunk_size=2, flush_interval_s=0.1, heartbeat_interval_s=0.5)
    return Pipeline(MysqlConnector(config, "mtypes"),
                    [JsonlOutput({"path": str(tmp / "out.jsonl")})],
                    state_path=str(tmp / "state.json"), settings=settings)


def _run(kit: Kit, tmp: Path, tables: list[str], inserts: list[str]) -> list[dict[str, Any]]:
    """Insert (log), dump (read), update v of every row (log), delete the two lowest keys
    (log)."""
    pipeline = _pipeline(kit, tmp, tables).start()
    try:
        _execute_zero_dates(kit, inserts)
        dump_id = pipeline.dump(tables)
        wait_until(lambda: dump_state(pipeline, dump_id) == "done", 60, "the dump")
        statements = []
        for table in tables:
            statements.append(f"UPDATE {table} SET v = v + 1")
            statements.append(f"DELETE FROM {table} ORDER BY id LIMIT 2")
        _execute_zero_dates(kit, statements)
        target = kit.current_position()

        def caught_up() -> bool:
            position = pipeline.status()["committed_position"]
            return position is not None and kit.parse_position(position) >= target

        wait_until(caught_up, 60, "the stream to catch up")
    finally:
        pipeline.stop()
    return read_events(tmp / "out.jsonl")


def _check_parity(events: list[dict[str, Any]], table: str, rows: int) -> None:
    by_op: dict[str, dict[Any, dict[str, Any]]] = {}
    for event in events:
        if event.get("table") == table and event["op"] in ("insert", "read", "update",
                                                             "delete"):
            assert tuple(event["key"]) not in by_op.setdefault(event["op"], {}), event
            by_op[event["op"]][tuple(event["key"])] = event
    reads, inserts, updates = by_op["read"], by_op["insert"], by_op["update"]
    assert len(reads) == rows, (table, sorted(reads))
    assert set(inserts) == set(reads) == set(updates), (table, sorted(inserts), sorted(reads))
    deletes = by_op.get("delete", {})
    assert deletes and set(deletes) < set(reads), (table, sorted(deletes))
    for key, read in reads.items():
        assert inserts[key]["after"] == read["after"], (table, key)
        assert updates[key]["before"] == read["after"], (table, key)
        assert "old_key" not in updates[key], (table, key)
        after = {**read["after"], "v": read["after"]["v"] + 1}
        assert updates[key]["after"] == after, (table, key)
        if key in deletes:
            assert deletes[key]["before"] == after, (table, key)


@pytest.fixture()
def maria(maria_dsn: str) -> Kit:
    return Kit("mariadb", maria_dsn)


def test_uuid_inet4_inet6_keys_are_equal_in_dump_and_log(maria: Kit, tmp_path: Path) -> None:
    tables, inserts = [], []
    for name, (kind, values) in KEY_TABLES.items():
        maria.execute(f"CREATE TABLE {name} (id {kind} PRIMARY KEY, v int NOT NULL)")
        inserts.append(f"INSERT INTO {name} VALUES " + ", ".join(f"({v}, 0)" for v in values))
        tables.append(maria.table(name))
    events = _run(maria, tmp_path, tables, inserts)
    for name, (_, values) in KEY_TABLES.items():
        _check_parity(events, name, len(values))
    keys = {tuple(e["key"]) for e in events if e["op"] == "read"}
    assert ("aafa4db5-e7ab-11f1-8b7e-02fc00000001",) in keys
    assert ("ffffffff-ffff-4fff-bfff-ffffffffffff",) in keys
    assert {("0.0.0.0",), ("255.255.255.255",), ("0.0.0.1",)} <= keys
    assert {("::",), ("::1",), ("::ffff:1.2.3.4",), ("::1.2.3.4",), ("1::2:3:4:5:6:7",),
            ("1::",), ("1:0:0:2::3",), ("2001:db8::ff00:42:8329",)} <= keys
    assert replayed(events) == maria.source_rows(tables)


def test_json_zero_dates_and_spatial_values_are_equal_in_dump_and_log(
        maria: Kit, tmp_path: Path) -> None:
    maria.execute(f"CREATE TABLE parity ({PARITY})")
    maria.execute(f"CREATE TABLE fast ({FAST})")
    tables = [maria.table("parity"), maria.table("fast")]
    events = _run(maria, tmp_path, tables, [
        f"INSERT INTO parity VALUES {', '.join(PARITY_ROWS)}",
        f"INSERT INTO fast VALUES {', '.join(FAST_ROWS)}"])
    _check_parity(events, "parity", 3)
    _check_parity(events, "fast", 3)
    read = {(e["table"], e["key"][0]): e["after"] for e in events if e["op"] == "read"}
    first, second, third = (read["parity", k] for k in (1, 2, 3))
    assert first["j"] == '{"k": [1, 2.50, "é ü 😀"], "k": 2}'
    assert third["j"] == '{"a":1,  "a" : "Ωmega"}'
    assert read["fast", 1]["j"] == '{"k": 1, "k": "é"}' and read["fast", 2]["j"] == "[1, 2.50]"
    assert first["u"] == "aafa4db5-e7ab-11f1-8b7e-02fc00000001" and second["i4"] == "0.0.0.0"
    assert second["i6"] == "::ffff:1.2.3.4" and first["i6"] == "2001:db8::ff00:42:8329"
    # dates with a zero part have no ISO form: null on both paths, like the all-zero date
    assert first["d"] is None and first["dt"] is None and second["d"] is None
    assert read["fast", 1]["d"] is None and read["fast", 3]["d"] == "2024-03-01"
    assert third["d"] is None and third["dt6"] is None and third["dt"] == "2024-02-29 23:59:59"
    assert first["ts"] is None and second["ts"] == "1970-01-01 00:00:01"
    assert second["dt6"] == "2024-01-01 00:00:00.500000"
    # spatial: hex of the stored value (4-byte little-endian SRID, then the WKB)
    assert first["g"] == "00000000" + "0101000000" + "000000000000f03f" + "0000000000000040"
    assert second["gg"].startswith("e6100000" + "0103000000")
    assert replayed(events) == maria.source_rows(tables)
