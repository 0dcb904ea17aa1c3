"""Issue 16 on a real MariaDB: the keys of a ``dump_keys`` request are checked against the key
columns' types and ranges before the request is accepted or stored; a bad one is refused
naming the table, the column and the value, the running pipeline goes on, and good keys dump
their rows (the MySQL connector's :class:`dblog.spi.KeyListParser`)."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import pytest

from dblog.app.pipeline import Pipeline
from dblog.engine import EngineSettings
from dblog.errors import DumpRequestError
from dblog.outputs.jsonl import JsonlOutput

from .pgutil import dump_state, read_events, read_keys, stored_dump_ids, wait_until
from .sources import Kit

pytestmark = pytest.mark.integration

SCHEMA = [
    "CREATE TABLE t1 (id int PRIMARY KEY, v text)",
    "CREATE TABLE tu (id bigint unsigned PRIMARY KEY, u uuid)",
    "CREATE TABLE tt (a varchar(3), b tinyint, PRIMARY KEY (a, b))",
    "CREATE TABLE td (d decimal(6,2) PRIMARY KEY, at datetime NOT NULL)",
    "CREATE TABLE tb (h binary(4) PRIMARY KEY)",
    "INSERT INTO t1 VALUES " + ", ".join(f"({i}, 'v{i}')" for i in range(1, 31)),
    "INSERT INTO tu VALUES (18446744073709551615, uuid())",
    "INSERT INTO tt VALUES ('a', 1), ('B', 2)",
    "INSERT INTO td VALUES (1.50, '2024-01-01 00:00:00'), (-0.25, '2024-01-02 00:00:00')",
    "INSERT INTO tb VALUES (0x0a000000)",
]


def bad_keys(db: str) -> list[tuple[str, Any, list[str]]]:
    """(table, keys, what the rejection must say)."""
    return [
        (f"{db}.t1", [[2**70]], ["column id", f"{db}.t1", "out of range",
                                 "1180591620717411303424"]),
        (f"{db}.t1", [[2**31]], ["column id", "out of range", "2147483648"]),
        (f"{db}.t1", [["abc"]], ["column id", "not an integer", "'abc'"]),
        (f"{db}.t1", [[1.5]], ["column id", "not an integer"]),
        (f"{db}.t1", [[True]], ["column id", "a boolean"]),
        (f"{db}.t1", [[1, 2]], ["has 1 value"]),
        (f"{db}.t1", [[None]], ["null"]),
        (f"{db}.t1", [1, 2], ["a list of keys"]),
        (f"{db}.tu", [[-1]], ["column id", "out of range (0 to 18446744073709551615)"]),
        (f"{db}.tu", [[2**64]], ["column id", "out of range"]),
        (f"{db}.tt", [["abcd", 1]], ["column a", "longer than the column's 3 characters"]),
        (f"{db}.tt", [["a", 128]], ["column b", "out of range (-128 to 127)"]),
        (f"{db}.td", [[1.505]], ["column d", "more than 2 decimal places"]),
        (f"{db}.td", [["12345.6"]], ["column d", "more than 4 digits"]),
        (f"{db}.td", [["x"]], ["column d", "not a number"]),
        (f"{db}.tb", [["zz"]], ["column h", "not a hex string"]),
        (f"{db}.tb", [["0102030405"]], ["column h", "longer than the column's 4 bytes"]),
        (f"{db}.nope", [[1]], ["unknown table"]),
    ]


def _pipeline(kit: Kit, tmp: Path) -> Pipeline:
    from dblog.connectors.mysql import MysqlConnector

    server_id = 3000 + zlib.crc32(kit.dsn.encode()) % 1_000_000
    config = {"type": "mariadb", "dsn": kit.dsn, "server_id": server_id,
              "tables": [kit.table("*")]}
    settings = EngineSettings(chunk_size=7, flush_interval_s=0.1, heartbeat_interval_s=0.5,
                              poll_timeout_s=0.05)
    return Pipeline(MysqlConnector(config, "robust"),
                    [JsonlOutput({"path": str(tmp / "out.jsonl")})],
                    state_path=str(tmp / "state.json"), settings=settings)


def test_key_requests_are_checked_against_the_key_types_and_fail_alone(
        maria_dsn: str, tmp_path: Path) -> None:
    kit = Kit("mariadb", maria_dsn)
    for statement in SCHEMA:
        kit.execute(statement)
    db = kit.schema
    pipeline = _pipeline(kit, tmp_path).start()
    try:
        for table, keys, expected in bad_keys(db):
            with pytest.raises(DumpRequestError) as rejected:
                pipeline.dump_keys(table, keys)
            for part in expected:
                assert part in rejected.value.message, (table, keys, rejected.value.message)
        assert pipeline.is_running()
        good = [pipeline.dump_keys(f"{db}.t1", [[3], ["4"], [2**31 - 1]]),
                pipeline.dump_keys(f"{db}.tu", [[2**64 - 1]]),
                pipeline.dump_keys(f"{db}.tt", [["b", 2], ["A", "1"]]),
                pipeline.dump_keys(f"{db}.td", [["1.5"], [-0.25]]),
                pipeline.dump_keys(f"{db}.tb", [["0A"]])]
        for dump_id in good:
            wait_until(lambda d=dump_id: dump_state(pipeline, d) == "done", 60,  # type: ignore[misc]
                       f"dump {dump_id}")
        kit.execute("INSERT INTO t1 VALUES (100, 'after')")
        wait_until(lambda: any(e.get("key") == [100] for e in read_events(tmp_path / "out.jsonl")),
                   60, "the insert made after the rejections")
    finally:
        pipeline.stop()
    assert stored_dump_ids(tmp_path / "state.json") == good  # nothing else
    assert read_keys(tmp_path / "out.jsonl") == [
        ("t1", (3,)), ("t1", (4,)), ("tb", ("0a000000",)), ("td", ("-0.25",)),
                     ("td", ("1.50",)), ("tt", ("A", 1)), ("tt", ("B", 2)),
                     ("tu", (2**64 - 1,))]
