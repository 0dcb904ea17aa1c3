"""Only driver errors are classified: a bug in the reader (an AssertionError) escapes as itself,
not as a FatalSourceError with an empty message; a row image that does not decode stops with one
error naming the table and the column, on the fast path and on mysql-replication's path."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from pymysqlreplication.row_event import WriteRowsEvent

from dblog.connectors.mysql import rowcodec
from dblog.connectors.mysql.binlog import MysqlLogReader
from dblog.connectors.mysql.errors import classify
from dblog.connectors.mysql.fastpath import FastPath
from dblog.connectors.mysql.flavor import Flavor
from dblog.core.model import Op, TableId
from dblog.errors import (
    DumpRequestError,
    FatalSourceError,
    RetryableSourceError,
    TableChanged,
)

MARIADB = Flavor("mariadb", (10, 11), True)


def _columns() -> list[SimpleNamespace]:
    base = {"unsigned": False, "fsp": 0, "max_length": 40, "enum_values": None,
            "set_values": None}
    return [SimpleNamespace(name="id", type=3, character_set_name=None, collation_name=None,
                            **base),
            SimpleNamespace(name="note", type=15, character_set_name="utf8mb4",
                            collation_name="utf8mb4_bin", **base)]


def _reader(stream: Any) -> MysqlLogReader:
    reader = MysqlLogReader.__new__(MysqlLogReader)
    reader._stream = stream
    return reader


def test_a_bug_is_not_turned_into_a_source_error() -> None:
    def fetchone() -> None:
        raise AssertionError("the reader's own invariant")

    with pytest.raises(AssertionError, match="invariant"):
        _reader(SimpleNamespace(fetchone=fetchone))._fetch_once()


def test_classify_never_gives_an_empty_message() -> None:
    error = classify(AssertionError(), "reading the binlog")
    assert isinstance(error, FatalSourceError) and "AssertionError" in error.message
    assert isinstance(classify(ConnectionResetError(), "x"), RetryableSourceError)


def test_an_unknown_column_is_a_changed_table_and_an_unknown_table_a_bad_request() -> None:
    import pymysql

    changed = classify(pymysql.err.OperationalError(1054, "Unknown column 'gone' in 'SELECT'"),
                       "reading a chunk of db.t")
    assert isinstance(changed, TableChanged) and "Unknown column 'gone'" in changed.message
    missing = classify(pymysql.err.ProgrammingError(1146, "Table 'db.t' doesn't exist"), "x")
    assert isinstance(missing, DumpRequestError) and not isinstance(missing, TableChanged)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_value_that_does_not_decode_on_the_fast_path_names_table_and_column(
        compiled: bool) -> None:
    if compiled and not rowcodec.COMPILED:
        pytest.skip("the C extension is not built")
    codec = rowcodec.codec_for(_columns(), MARIADB, {}, compiled=compiled)
    plan = SimpleNamespace(table=TableId("shop", "notes"), codec=codec)
    fast = FastPath(lambda *args: None, lambda: False)
    image = b"\x00" + (1).to_bytes(4, "little") + b"\x02\xff\xfe"  # not UTF-8
    data = bytes(28) + b"\x02" + b"\x03" + image  # header, table id, flags; 2 columns, all
    with pytest.raises(FatalSourceError) as caught:
        fast._rows(23, plan, data, len(data), 400)
    assert "shop.notes" in caught.value.message and "'note'" in caught.value.message
    assert "'id'" not in caught.value.message


def test_a_value_that_does_not_decode_on_the_normal_path_names_table_and_column() -> None:
    event = WriteRowsEvent.__new__(WriteRowsEvent)
    event.schema, event.table, event.table_id, event.columns = "shop", "notes", 5, _columns()

    def rows(*args: Any) -> list[Any]:
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")

    reader = _reader(SimpleNamespace(log_file="mariadb-bin.000001"))
    reader._tx_position = reader._txid = reader._ts = None
    reader.decoder = SimpleNamespace(rows=rows)  # type: ignore[assignment]
    with pytest.raises(FatalSourceError) as caught:
        reader._on_event(event, [], SimpleNamespace(log_pos=400))
    assert "shop.notes" in caught.value.message and "'note'" in caught.value.message
    assert Op.INSERT  # the event was a write
