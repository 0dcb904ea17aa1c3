"""Transaction boundaries of the binlog reader on a real MariaDB: ``CREATE TABLE ... SELECT``
is one transaction (DDL, rows, XID) whose commit comes after its rows; a row change logged as a
statement (``binlog_format=STATEMENT``) stops the stream with the fix when it writes a captured
table, and is passed over when it does not."""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from typing import Any

import pytest

from dblog.core.model import ChangeEvent, LogItem, Op
from dblog.errors import FatalSourceError

from .workload import maria_connect

pytestmark = pytest.mark.integration


@pytest.fixture()
def reader_of(maria_dsn: str) -> Iterator[Any]:
    from dblog.connectors.mysql import MysqlConnector

    opened: list[Any] = []
    schema = maria_dsn.rsplit("/", 1)[1]

    def make(tables: list[str]) -> Any:
        config = {"type": "mariadb", "dsn": maria_dsn, "tables": [f"{schema}.{t}" for t in tables],
                  "server_id": 1000 + zlib.crc32(maria_dsn.encode()) % 1_000_000}
        connector = MysqlConnector(config, schema)  # its own start record
        connector.prepare()
        reader = connector.log_reader()
        reader.start(None)
        opened.extend([reader, connector])
        return reader

    yield make
    for thing in opened:
        thing.close()


def _sql(dsn: str, *statements: str) -> None:
    conn = maria_connect(dsn)
    with conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
    conn.close()


def _drain(reader: Any, transactions: int, seconds: float = 5.0) -> list[LogItem]:
    """The change events of the next ``transactions`` non-empty transactions (the start record
    written at start is an empty one for the reader)."""
    items: list[ChangeEvent] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and sum(i.op is Op.COMMIT for i in items) < transactions:
        for item in reader.poll(0.2):
            if not isinstance(item, ChangeEvent):
                continue
            if item.op is Op.COMMIT and items and items[-1].op is Op.BEGIN:
                items.pop()  # an empty transaction
            else:
                items.append(item)
    return list(items)


def _shape(items: list[LogItem]) -> list[tuple[str, str | None, Any]]:
    return [(i.op.value, i.table.name if i.table else None, i.key) for i in items
            if isinstance(i, ChangeEvent)]


def test_create_table_select_is_one_transaction(maria_dsn: str, reader_of: Any) -> None:
    _sql(maria_dsn, "CREATE TABLE src (id int PRIMARY KEY, v int)",
         "INSERT INTO src VALUES (1, 10), (2, 20)")
    reader = reader_of(["*"])
    _sql(maria_dsn, "CREATE TABLE dst (PRIMARY KEY (id)) SELECT * FROM src",
         "INSERT INTO src VALUES (3, 30)", "INSERT INTO src VALUES (4, 40)")
    items = _drain(reader, 3)
    assert _shape(items) == [
        ("begin", None, None), ("schema", "dst", None), ("insert", "dst", (1,)),
        ("insert", "dst", (2,)), ("commit", None, None),
        ("begin", None, None), ("insert", "src", (3,)), ("commit", None, None),
        ("begin", None, None), ("insert", "src", (4,)), ("commit", None, None)]
    commits = [i for i in items if isinstance(i, ChangeEvent) and i.op is Op.COMMIT]
    gtids = [str(i.position) for i in items if isinstance(i, ChangeEvent) and i.op is Op.BEGIN]
    # every commit carries its transaction's GTID position (none fell back to a file offset)
    assert [type(c.position).__name__ for c in commits] == ["MariadbGtid"] * 3
    assert [str(c.position).split("@")[0] for c in commits] == [g.split("@")[0] for g in gtids]


def test_a_row_change_logged_as_a_statement_stops_the_stream(maria_dsn: str,
                                                             reader_of: Any) -> None:
    _sql(maria_dsn, "CREATE TABLE t (id int PRIMARY KEY, v int)",
         "CREATE TABLE other (id int PRIMARY KEY, v int)")
    reader = reader_of(["t"])
    _sql(maria_dsn, "SET SESSION binlog_format = 'STATEMENT'",
         "INSERT INTO other VALUES (1, 10)",  # not captured: passed over
         "SET SESSION binlog_format = 'ROW'", "INSERT INTO t VALUES (1, 10)")
    assert _shape(_drain(reader, 1)) == [("begin", None, None), ("insert", "t", (1,)),
                                         ("commit", None, None)]
    _sql(maria_dsn, "SET SESSION binlog_format = 'STATEMENT'", "UPDATE t SET v = 11 WHERE id = 1")
    with pytest.raises(FatalSourceError) as caught:
        _drain(reader, 1)
    schema = maria_dsn.rsplit("/", 1)[1]
    assert f"{schema}.t" in caught.value.message and "UPDATE t SET v = 11" in caught.value.message
    assert "binlog_format = 'ROW'" in (caught.value.fix or "")
