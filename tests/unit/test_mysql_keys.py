"""The MySQL connector's key checks (connectors/mysql/keys.py): each user-given key value is
checked against its key column's type and range and brought to the canonical form, or refused
with a DumpRequestError naming the table, the column and the value."""

from __future__ import annotations

from typing import Any

import pytest

from dblog.connectors.mysql.chunks import MysqlChunkReader
from dblog.connectors.mysql.keys import parse_keys
from dblog.core.model import ColumnInfo, TableId, TableInfo
from dblog.errors import DumpRequestError
from dblog.spi import KeyListParser

TABLE = TableId("shop", "t")


def info(column_type: str, collation: str | None = None) -> TableInfo:
    return TableInfo(TABLE, (ColumnInfo("k", column_type), ColumnInfo("v", "text")), ("k",),
                     extra={"collations": {"k": collation, "v": "utf8mb4_general_ci"}})


def parsed(column_type: str, value: Any, collation: str | None = None) -> Any:
    return parse_keys(info(column_type, collation), [[value]])[0][0]


GOOD: list[tuple[str, Any, Any]] = [
    ("int(11)", 5, 5),
    ("int(11)", "-42", -42),
    ("int(11)", 7.0, 7),
    ("int", -(2**31), -(2**31)),
    ("int unsigned", 2**32 - 1, 2**32 - 1),
    ("bigint(20) unsigned", 2**64 - 1, 2**64 - 1),
    ("bigint(20)", -(2**63), -(2**63)),
    ("tinyint(1)", True, 1),
    ("mediumint(8) unsigned", 2**24 - 1, 2**24 - 1),
    ("year(4)", 2024, 2024),
    ("bit(3)", 7, 7),
    ("decimal(10,2)", "1.5", "1.50"),
    ("decimal(10,2)", 3, "3.00"),
    ("decimal(10,2)", -0.25, "-0.25"),
    ("decimal(10,2)", "-0.00", "0.00"),
    ("decimal(10,2)", "99999999.99", "99999999.99"),
    ("decimal(10,2)", "-1e3", "-1000.00"),
    ("decimal(65,30)", "1" * 35 + "." + "2" * 30, "1" * 35 + "." + "2" * 30),
    ("float", 0.1, 0.1),
    ("double", "2.5", 2.5),
    ("varchar(3)", "abc", "abc"),
    ("varchar(10)", 12, "12"),
    ("char(36)", "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"),
    ("binary(4)", "0A", "0a000000"),
    ("varbinary(4)", "aabb", "aabb"),
    ("date", "2024-02-29", "2024-02-29"),
    ("datetime", "2024-01-02 03:04:05", "2024-01-02 03:04:05"),
    ("datetime(6)", "2024-01-02 03:04:05.5", "2024-01-02 03:04:05.500000"),
    ("timestamp", "1970-01-01 00:00:01", "1970-01-01 00:00:01"),
    ("time", "-12:30:00", "-12:30:00"),
    ("time(3)", "838:59:59.000", "838:59:59"),
    ("enum('a','b''c')", "b'c", "b'c"),
    ("enum('a','B')", "b", "B"),
    ("set('x','y','z')", "z,x", "x,z"),
    ("uuid", "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    ("inet4", "10.0.0.1", "10.0.0.1"),
    ("inet6", "0:0:0:0:0:0:0:1", "::1"),
]


@pytest.mark.parametrize(("column_type", "value", "canonical"), GOOD)
def test_a_value_the_column_holds_is_canonical(column_type: str, value: Any,
                                               canonical: Any) -> None:
    assert parsed(column_type, value) == canonical


def test_strings_are_normalised_under_the_column_collation() -> None:
    assert parsed("varchar(10)", "abc ", "utf8mb4_general_ci") == "ABC"
    assert parsed("char(5)", "abc  ", "utf8mb4_bin") == "abc"
    assert parsed("enum('a','b')", "A", "utf8mb4_general_ci") == "A"


BAD: list[tuple[str, Any, str]] = [
    ("int(11)", 2**70, "out of range (-2147483648 to 2147483647)"),
    ("int(11)", 2**31, "out of range"),
    ("int(11)", -(2**31) - 1, "out of range"),
    ("int(11) unsigned", -1, "out of range (0 to 4294967295)"),
    ("bigint(20) unsigned", 2**64, "out of range"),
    ("bigint(20)", 2**63, "out of range"),
    ("tinyint(4)", 128, "out of range (-128 to 127)"),
    ("tinyint(3) unsigned", 256, "out of range (0 to 255)"),
    ("int(11)", "abc", "not an integer"),
    ("int(11)", "1.5", "not an integer"),
    ("int(11)", 1.5, "not an integer"),
    ("int(11)", True, "a boolean"),
    ("int(11)", [1], "not an integer"),
    ("year(4)", 1900, "out of range for YEAR"),
    ("bit(3)", 8, "out of range (0 to 7)"),
    ("decimal(10,2)", 1.505, "more than 2 decimal places"),
    ("decimal(10,2)", "100000000", "more than 8 digits before the decimal point"),
    ("decimal(10,2)", "1e999999999", "more than 8 digits"),
    ("decimal(10,2)", "1e-999999999", "more than 2 decimal places"),
    ("decimal(10,2)", "NaN", "not a finite number"),
    ("decimal(10,2)", "x", "not a number"),
    ("decimal(10,2)", False, "not a number"),
    ("decimal(10,2) unsigned", "-1", "negative"),
    ("float", 1e39, "out of range for FLOAT"),
    ("double", "nope", "not a number"),
    ("varchar(3)", "abcd", "longer than the column's 3 characters"),
    ("char(2)", "abc", "longer than the column's 2 characters"),
    ("varchar(3)", True, "not a string"),
    ("binary(4)", "zz", "not a hex string"),
    ("binary(4)", "abc", "not a hex string"),
    ("binary(4)", "0102030405", "longer than the column's 4 bytes"),
    ("varbinary(2)", 12, "not a hex string"),
    ("date", "2024-02-30", "not a valid date"),
    ("date", 20240101, "not a date string"),
    ("datetime", "2024-01-01 00:00:00.5", "more fractional-second digits than the column's 0"),
    ("datetime(6)", "2024-01-01 25:00:00", "not a valid date-time"),
    ("datetime", "2024-01-01 00:00:00+02:00", "time zone offset"),
    ("timestamp", "1969-12-31 23:00:00", "out of the TIMESTAMP range"),
    ("timestamp", "2038-01-19 03:14:08", "out of the TIMESTAMP range"),
    ("time", "839:00:00", "out of the TIME range"),
    ("time", "12:60:00", "not a time"),
    ("time(1)", "00:00:00.25", "more fractional-second digits than the column's 1"),
    ("enum('a','b')", "c", "not one of the column's labels"),
    ("set('x','y')", "x,w", "['w'] are not labels"),
    ("uuid", "not-a-uuid", "not a valid UUID"),
    ("inet4", "300.1.1.1", "not a valid INET4"),
    ("inet6", 1, "not a INET6 string"),
    ("json", "{}", "cannot be given in a request"),
    ("point", "00", "cannot be given in a request"),
]


@pytest.mark.parametrize(("column_type", "value", "reason"), BAD)
def test_a_value_the_column_cannot_hold_names_table_column_and_value(
        column_type: str, value: Any, reason: str) -> None:
    with pytest.raises(DumpRequestError) as refused:
        parsed(column_type, value)
    message = refused.value.message
    assert reason in message, message
    assert f"column k ({column_type}) of shop.t" in message, message
    assert "got " in message and refused.value.fix


def test_null_and_wrong_arity_are_refused() -> None:
    with pytest.raises(DumpRequestError, match="null"):
        parse_keys(info("int"), [[None]])
    for key in ([1, 2], [], "1", 1):
        with pytest.raises(DumpRequestError, match=r"has 1 value\(s\) \(k\)"):
            parse_keys(info("int"), [key])  # type: ignore[list-item]


def test_composite_keys_are_checked_per_column() -> None:
    table = TableInfo(TABLE, (ColumnInfo("a", "int(11)"), ColumnInfo("b", "varchar(2)")),
                      ("a", "b"), extra={"collations": {"a": None, "b": "utf8mb4_bin"}})
    assert parse_keys(table, [[1, "x"], ["2", "yz"]]) == [(1, "x"), (2, "yz")]
    with pytest.raises(DumpRequestError, match="column b"):
        parse_keys(table, [[1, "x"], [2, "xyz"]])


def test_the_chunk_reader_is_a_key_list_parser() -> None:
    reader = MysqlChunkReader.__new__(MysqlChunkReader)  # no connection needed to parse
    assert isinstance(reader, KeyListParser)
    assert reader.parse_key(info("int"), ["7"]) == (7,)
