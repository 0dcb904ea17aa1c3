"""Every common PostgreSQL type has the same canonical value in a log event and a dump row."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from dblog.app.pipeline import Pipeline
from dblog.connectors.postgres import PostgresConnector
from dblog.engine import EngineSettings
from dblog.outputs.jsonl import JsonlOutput

from .pgutil import dump_state, read_events, wait_until

pytestmark = pytest.mark.integration

COLUMNS = """
  id int PRIMARY KEY, i2 smallint, i8 bigint, b boolean, f4 real, f8 double precision,
  n numeric, n2 numeric(12,2), t text, vc varchar(20), c char(5), by bytea, j json, jb jsonb,
  u uuid, d date, tm time, tmz timetz, ts timestamp, tsz timestamptz, iv interval,
  ai int[], at text[], e mood, ip inet, bits bit(4), m money
"""
ROWS = [
    "(1, 1, 9007199254740993, true, 0.1, 0.1, 1.50, 3.14, 'héllo', 'v', 'ab', '\\x00ff', "
    "'{\"a\": [1, 2.50]}', '{\"b\": 1}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2024-02-29', "
    "'23:59:59.123456', '10:00+02', '2024-01-01 00:00:00.5', '2024-06-30 12:00:00+02', "
    "'1 day 02:03:04', '{1,2,3}', '{\"a b\",c}', 'happy', '10.0.0.1/8', B'1010', 12.34)",
    "(2, -32768, -9223372036854775808, false, 'NaN', 'Infinity', 'NaN', -0.01, '', '', '', '', "
    "'null', '[]', NULL, '0001-01-01', '00:00', '00:00+00', '1999-12-31 23:59:59', "
    "'2000-01-01 00:00:00+00', '-1 mons', '{}', '{}', 'sad', '::1', B'0000', 0)",
    "(3, NULL, NULL, NULL, '-Infinity', 1e300, 123456789012345678901234567890.123456789, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'infinity', NULL, NULL, NULL, '-infinity', NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL)",
    # a numeric beyond 64 bits without a fraction (wal2json prints a bare JSON integer), a
    # float with an exponent, and text outside the BMP
    "(4, NULL, NULL, NULL, 1.5e-30, -2.5e-300, 123456789012345678901234567890, 1e9, "
    "'\U0001F600 é', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL)",
]


def test_log_and_dump_values_are_identical_for_every_type(pg_dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TYPE mood AS ENUM ('sad', 'happy')")
        conn.execute(f"CREATE TABLE alltypes ({COLUMNS})")
    pipeline = Pipeline(
        PostgresConnector({"dsn": pg_dsn, "slot": "types", "tables": ["public.*"]}, "types"),
        [JsonlOutput({"path": str(tmp_path / "out.jsonl")})], state_path=str(tmp_path / "s.json"),
        settings=EngineSettings(chunk_size=2, flush_interval_s=0.1)).start()
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"INSERT INTO alltypes VALUES {', '.join(ROWS)}")
        dump_id = pipeline.dump(["public.alltypes"])
        wait_until(lambda: dump_state(pipeline, dump_id) == "done", 30, "the dump")
        wait_until(lambda: pipeline.status()["committed_seq"] >= pipeline.status()["emitted_seq"],
                   10, "the flush")
    finally:
        pipeline.stop()
    events = read_events(tmp_path / "out.jsonl")
    logged = {e["key"][0]: e["after"] for e in events if e["op"] == "insert"}
    dumped = {e["key"][0]: e["after"] for e in events if e["op"] == "read"}
    assert sorted(logged) == sorted(dumped) == [1, 2, 3, 4]
    for key in (1, 2, 3, 4):
        assert logged[key] == dumped[key], key
    first = logged[1]
    assert first["i8"] == 9007199254740993 and first["n"] == "1.50" and first["f4"] == 0.1
    assert first["by"] == "00ff" and first["b"] is True and first["ai"] == "{1,2,3}"
    assert logged[2]["f4"] is None and logged[2]["n"] is None and logged[2]["f8"] is None
    assert logged[3]["n"] == "123456789012345678901234567890.123456789"
    assert logged[4]["n"] == "123456789012345678901234567890" and logged[4]["f8"] == -2.5e-300
    assert logged[4]["n2"] == "1000000000.00" and logged[4]["t"] == "\U0001F600 é"
