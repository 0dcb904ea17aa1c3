"""Dumps by keys whose SQL order is not their value's text or DOUBLE order: ENUM and SET keys
(ordered by index / bits), FLOAT keys (compared widened to DOUBLE), and zero-date keys (no
canonical value: refused, never skipped)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from dblog.connectors.mysql import MysqlConnector
from dblog.core.model import ChangeEvent, Op, TableId
from dblog.errors import DumpRequestError
from tests.integration.mysql_fixtures import admin_connect
from tests.integration.sources import Kit


def _chunks(kit: Kit, name: str, size: int) -> list[list[Any]]:
    """The table read in chunks of ``size`` up to its maximum key, as a dump reads it."""
    reader = kit.chunk_reader()
    try:
        info = reader.table_info(TableId(kit.schema, name))
        upper, after = reader.max_key(info), None
        out: list[list[Any]] = []
        while True:
            rows = reader.read_chunk(info, after, upper, size).rows
            if not rows:
                return out
            out.append([key for key, _ in rows])
            after = rows[-1][0]
            assert len(out) < 10, out
    finally:
        reader.close()


def test_enum_and_set_keys_dump_in_their_own_order(maria_dsn: str) -> None:
    kit = Kit("mariadb", maria_dsn)
    kit.execute("CREATE TABLE ek (k ENUM('b','A','c') PRIMARY KEY, v int)")
    kit.execute("INSERT INTO ek VALUES ('a', 1), ('b', 2), ('c', 3)")
    assert _chunks(kit, "ek", 1) == [[("B",)], [("A",)], [("C",)]]
    kit.execute("CREATE TABLE sk (k SET('x','w','y') PRIMARY KEY, v int)")
    kit.execute("INSERT INTO sk VALUES ('w,y', 1), ('x', 2), ('y', 3), ('', 4)")
    assert _chunks(kit, "sk", 2) == [[("",), ("X",)], [("Y",), ("W,Y",)]]


def test_enum_key_of_the_log_equals_the_chunk_key(maria_dsn: str) -> None:
    kit = Kit("mariadb", maria_dsn)
    kit.execute("CREATE TABLE ek (k ENUM('b','A','c') PRIMARY KEY, v int)")
    config = {**kit.source_config("ek"), "tables": [kit.table("ek")]}
    connector = MysqlConnector(config, "ek")
    connector.prepare()
    reader = connector.log_reader()
    reader.start(None)
    try:
        kit.execute("INSERT INTO ek VALUES ('a', 1)")
        events: list[ChangeEvent] = []
        deadline = time.monotonic() + 10
        while not events and time.monotonic() < deadline:
            events = [i for i in reader.poll(0.2)
                      if isinstance(i, ChangeEvent) and i.op is Op.INSERT]
    finally:
        reader.close()
        connector.close()
    assert [e.key for e in events] == [c[0] for c in _chunks(kit, "ek", 5)] == [("A",)]


def test_float_key_chunks_neither_repeat_nor_miss_rows(maria_dsn: str) -> None:
    kit = Kit("mariadb", maria_dsn)
    kit.execute("CREATE TABLE fk (k FLOAT PRIMARY KEY, v int)")
    kit.execute("INSERT INTO fk VALUES (0.1, 1), (0.2, 2), (0.3, 3)")
    assert _chunks(kit, "fk", 2) == [[(0.1,), (0.2,)], [(0.3,)]]
    kit.execute("CREATE TABLE fk2 (k FLOAT, id int, PRIMARY KEY (k, id))")
    kit.execute("INSERT INTO fk2 VALUES (0.1, 1), (0.1, 2), (0.7, 1)")
    assert _chunks(kit, "fk2", 1) == [[(0.1, 1)], [(0.1, 2)], [(0.7, 1)]]


def test_zero_date_key_stops_the_dump_with_the_fix(maria_dsn: str) -> None:
    kit = Kit("mariadb", maria_dsn)
    kit.execute("CREATE TABLE zk (k DATETIME PRIMARY KEY, v int)")
    conn: Any = admin_connect(maria_dsn.rsplit("/", 1)[0] + "/", kit.schema)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("INSERT INTO zk VALUES ('0000-00-00 00:00:00', 0), "
                    "('2024-01-01 00:00:00', 1), ('2024-01-02 00:00:00', 2)")
    conn.close()
    with pytest.raises(DumpRequestError, match="zero date") as caught:
        _chunks(kit, "zk", 1)
    assert "UPDATE" in (caught.value.fix or "")
