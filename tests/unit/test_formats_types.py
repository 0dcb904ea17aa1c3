"""The type mapping of debezium-json and canal-json per source (docs/formats.md): documented
values for every column type of the type tests, identical for a log event and a dump row
(plain or pre-encoded) of one column, and read back to the source's value by the reference
consumers."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from dblog.connectors.mysql.positions import MariadbGtid
from dblog.connectors.postgres.positions import Lsn
from dblog.core.model import ChangeEvent, ColumnInfo, EncodedRow, Op, TableId, TableInfo
from dblog.core.positions import Position
from dblog.formats.canal import CanalFormat
from dblog.formats.changelog import ChangelogFormat
from dblog.formats.debezium import DebeziumFormat
from tests.changelog_consumers import debezium_expected
from tests.changelog_values import canal_reverse, debezium_reverse

_WKB = "0101000000000000000000f03f0000000000000040"

# (column type, canonical value, debezium-json value, canal-json value)
POSTGRES: list[tuple[str, Any, Any, Any]] = [
    ("smallint", -32768, -32768, "-32768"),
    ("bigint", 9007199254740993, 9007199254740993, "9007199254740993"),
    ("boolean", True, True, "true"),
    ("real", 0.1, 0.1, "0.1"),
    ("double precision", 1e300, 1e300, "1e+300"),
    ("numeric", "1.50", "1.50", "1.50"),
    ("numeric(12,2)", "-0.01", "-0.01", "-0.01"),
    ("text", "h\u00e9llo \U0001F600", "h\u00e9llo \U0001F600", "h\u00e9llo \U0001F600"),
    ("character varying(20)", "v", "v", "v"),
    ("character(5)", "ab   ", "ab   ", "ab   "),
    ("bytea", "00ff", "AP8=", "AP8="),
    ("json", '{"a": [1, 2.50]}', '{"a": [1, 2.50]}', '{"a": [1, 2.50]}'),
    ("jsonb", '{"b": 1}', '{"b": 1}', '{"b": 1}'),
    ("uuid", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
     "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    ("date", "2024-02-29", 19782, "2024-02-29"),
    ("date", "0001-01-01", -719162, "0001-01-01"),
    ("date", "infinity", 2**31 - 1, "infinity"),
    ("time without time zone", "23:59:59.123456", 86399123456, "23:59:59.123456"),
    ("time(3) without time zone", "23:59:59.123", 86399123, "23:59:59.123"),
    ("time with time zone", "10:00:00+02", "08:00:00Z", "10:00:00+02"),
    ("timestamp without time zone", "2024-01-01 00:00:00.5", 1704067200500000,
     "2024-01-01 00:00:00.5"),
    ("timestamp(3) without time zone", "2024-01-01 00:00:00.5", 1704067200500,
     "2024-01-01 00:00:00.5"),
    ("timestamp with time zone", "2024-06-30 10:00:00.25+00", "2024-06-30T10:00:00.25Z",
     "2024-06-30 10:00:00.25"),
    ("timestamp(3) with time zone", "2024-06-30 10:00:00+00", "2024-06-30T10:00:00.000Z",
     "2024-06-30 10:00:00"),
    ("timestamp with time zone", "-infinity", "-infinity", "-infinity"),
    ("interval", "1 day 02:03:04", "P0Y0M1DT2H3M4S", "1 day 02:03:04"),
    ("interval", "-1 mons", "P0Y-1M0DT0H0M0S", "-1 mons"),
    ("integer[]", "{1,NULL,3}", [1, None, 3], "{1,NULL,3}"),
    ("text[]", '{"a b",c}', ["a b", "c"], '{"a b",c}'),
    ("integer[]", "{{1,2},{3,4}}", [[1, 2], [3, 4]], "{{1,2},{3,4}}"),
    ("mood", "happy", "happy", "happy"),
    ("inet", "10.0.0.1/8", "10.0.0.1/8", "10.0.0.1/8"),
    ("bit(4)", "1010", "Cg==", "1010"),
    ("bit(1)", "1", True, "1"),
    ("money", "$1,012.34", "1012.34", "$1,012.34"),
]

MYSQL: list[tuple[str, Any, Any, Any]] = [
    ("tinyint(4)", -128, -128, "-128"),
    ("tinyint(3) unsigned", 255, 255, "255"),
    ("int(10) unsigned", 4294967295, 4294967295, "4294967295"),
    ("bigint(20) unsigned", 18446744073709551615, 18446744073709551615,
     "18446744073709551615"),
    ("decimal(30,10)", "-12345678901234567890.0123456789",
     "-12345678901234567890.0123456789", "-12345678901234567890.0123456789"),
    ("float", 0.1, 0.1, "0.1"),
    ("double", 1e300, 1e300, "1e+300"),
    ("date", "2024-02-29", 19782, "2024-02-29"),
    ("datetime", "2024-01-01 10:11:12", 1704103872000, "2024-01-01 10:11:12"),
    ("datetime(6)", "1999-12-31 23:59:59.999999", 946684799999999,
     "1999-12-31 23:59:59.999999"),
    ("datetime(6)", "2024-01-01 00:00:00", 1704067200000000, "2024-01-01 00:00:00.000000"),
    ("timestamp(3)", "2024-06-30 12:00:00.123000", "2024-06-30T12:00:00.123Z",
     "2024-06-30 12:00:00.123"),
    ("timestamp", "1970-01-01 00:00:01", "1970-01-01T00:00:01Z", "1970-01-01 00:00:01"),
    ("time", "-838:59:59", -3020399000000, "-838:59:59"),
    ("time(6)", "-00:00:00.500000", -500000, "-00:00:00.500000"),
    ("year(4)", 2024, 2024, "2024"),
    ("char(5)", "ab", "ab", "ab"),
    ("varchar(20) CHARACTER SET latin1", "\u00dcn\u00efc\u00f6d\u00e9",
     "\u00dcn\u00efc\u00f6d\u00e9", "\u00dcn\u00efc\u00f6d\u00e9"),
    ("binary(6)", "610000000000", "YQAAAAAA", "YQAAAAAA"),
    ("varbinary(10)", "00ff00", "AP8A", "AP8A"),
    ("blob", "deadbeef00", "3q2+7wA=", "3q2+7wA="),
    ("enum('a','b','c d')", "c d", "c d", "c d"),
    ("set('x','y','z')", "x,z", "x,z", "x,z"),
    ("json", '{"a": [1, 2.50, "x"], "b": null}', '{"a": [1, 2.50, "x"], "b": null}',
     '{"a": [1, 2.50, "x"], "b": null}'),
    ("bit(10)", 682, "qgI=", "682"),
    ("bit(1)", 1, True, "1"),
    ("uuid", "aafa4db5-e7ab-11f1-8b7e-02fc00000001", "aafa4db5-e7ab-11f1-8b7e-02fc00000001",
     "aafa4db5-e7ab-11f1-8b7e-02fc00000001"),
    ("inet6", "2001:db8::ff00:42:8329", "2001:db8::ff00:42:8329", "2001:db8::ff00:42:8329"),
    ("point", "00000000" + _WKB,
     {"wkb": base64.b64encode(bytes.fromhex(_WKB)).decode(), "srid": 0},
     base64.b64encode(bytes.fromhex("00000000" + _WKB)).decode()),
]

CASES = [("postgresql", *case) for case in POSTGRES] + [("mysql", *case) for case in MYSQL]


def _info(family: str, type_name: str) -> TableInfo:
    schema = "public" if family == "postgresql" else "shop"
    return TableInfo(TableId(schema, "t"), (ColumnInfo("id", "integer" if family ==
                                                       "postgresql" else "int(11)"),
                                            ColumnInfo("c", type_name)), ("id",))


def _position(family: str) -> Position:
    return Lsn(0x100) if family == "postgresql" else MariadbGtid(((0, 1, 4),))


def _values(fmt: ChangelogFormat, family: str, type_name: str, value: Any
            ) -> list[dict[str, Any]]:
    """The column's value in a log insert, a dump row and a pre-encoded dump row."""
    info, row = _info(family, type_name), {"id": 1, "c": value}
    events = [ChangeEvent(Op.INSERT, info.table, (1,), None, dict(row), _position(family), 4,
                          "2024-05-01 12:00:00+00", seq=1),
              ChangeEvent(Op.READ, info.table, (1,), None, dict(row), _position(family), seq=2),
              ChangeEvent(Op.READ, info.table, (1,), None, EncodedRow(orjson.dumps(row)),
                          _position(family), seq=3)]
    return [orjson.loads(fmt.encode_records(e, info)[0].value or b"") for e in events]


@pytest.mark.parametrize(("family", "type_name", "canonical", "debezium", "canal"), CASES)
def test_debezium_values_equal_in_log_and_dump_and_read_back(
        family: str, type_name: str, canonical: Any, debezium: Any, canal: Any) -> None:
    documents = _values(DebeziumFormat(), family, type_name, canonical)
    assert [d["after"]["c"] for d in documents] == [debezium] * 3
    assert all(type(d["after"]["c"]) is type(debezium) for d in documents)
    back = debezium_reverse(family, type_name)(documents[0]["after"]["c"])
    assert back == debezium_expected(family, {"c": type_name}, {"c": canonical})["c"]


@pytest.mark.parametrize(("family", "type_name", "canonical", "debezium", "canal"), CASES)
def test_canal_values_equal_in_log_and_dump_and_read_back(
        family: str, type_name: str, canonical: Any, debezium: Any, canal: Any) -> None:
    messages = _values(CanalFormat(), family, type_name, canonical)
    assert [m["data"][0]["c"] for m in messages] == [canal] * 3
    message = messages[0]
    reverse = canal_reverse(family, message["mysqlType"]["c"], message["sqlType"]["c"])
    assert reverse(message["data"][0]["c"]) == canonical
    assert message["mysqlType"]["c"] == type_name


def test_null_is_null_in_every_column_and_format() -> None:
    for family, type_name, *_ in CASES:
        for fmt in (DebeziumFormat(), CanalFormat()):
            documents = _values(fmt, family, type_name, None)
            images = [d["after"] if "after" in d else d["data"][0] for d in documents]
            assert [image["c"] for image in images] == [None] * 3, (family, type_name)
