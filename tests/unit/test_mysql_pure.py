"""Pure parts of the MySQL connector: positions, collation keys, canonical values, DDL parsing,
start-up checks."""

from __future__ import annotations

import datetime
from decimal import Decimal

from dblog.connectors.mysql.collation import key_converter, normaliser
from dblog.connectors.mysql.decoder import parse_ddl
from dblog.connectors.mysql.flavor import detect, mysql_json_text
from dblog.connectors.mysql.positions import BinlogPosition, MariadbGtid, MysqlGtidSet
from dblog.connectors.mysql.setup import check_binlog
from dblog.connectors.mysql.types import (
    dump_converter,
    json_expression,
    padded_hex,
    set_converter,
    to_bit,
    to_datetime,
    to_float32,
    to_time,
)
from dblog.core.model import Op, TableId
from dblog.core.positions import decode_position


def test_mariadb_gtid_positions_order_by_domain_and_round_trip() -> None:
    a = MariadbGtid.parse("0-1-5,1-2-9")
    b = a.with_gtid(0, 1, 6)
    assert a < b and b > a and a <= a and not b < a
    crossing = MariadbGtid.parse("0-1-7,1-2-1")
    assert not crossing < b and not crossing > b  # crossing positions are incomparable
    assert decode_position(b.encode()) == b and str(b) == "0-1-6,1-2-9"
    assert MariadbGtid.parse("") < MariadbGtid.parse("0-1-1")


def test_mysql_gtid_sets_order_by_inclusion_and_merge() -> None:
    sid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    s = MysqlGtidSet.parse(f"{sid.upper()}:1-5:7")
    t = s.with_gtid(sid, 6)
    assert str(t) == f"{sid}:1-7" and s < t and not t < s
    assert decode_position(t.encode()) == t


def test_binlog_positions_order_by_file_number_then_offset() -> None:
    assert BinlogPosition("bin.000009", 900) < BinlogPosition("bin.000010", 4)
    assert decode_position("binlog:bin.000010:4") == BinlogPosition("bin.000010", 4)


def test_case_insensitive_collations_fold_case_accents_and_pad_spaces() -> None:
    general = normaliser("utf8mb4_general_ci")
    assert general is not None
    assert general("abc") == general("ABC") == general("Abc  ") == "ABC"
    assert general("é") == general("E")
    accent = normaliser("utf8mb4_0900_as_ci")
    assert accent is not None and accent("é") != accent("e") and accent("é") == accent("É")
    assert accent("a ") != accent("a")  # 0900 collations are NO PAD
    binary_pad = normaliser("utf8mb4_bin")
    assert binary_pad is not None and binary_pad("a ") == "a" and binary_pad("A") != "a"
    assert normaliser("binary") is None and normaliser(None) is None
    assert normaliser("utf8mb4_nopad_bin") is None
    convert = key_converter("latin1_swedish_ci")
    assert convert is not None and convert(5) == 5 and convert("x") == "X"


def test_canonical_values_agree_between_driver_and_binlog_shapes() -> None:
    assert dump_converter("decimal(10,2)")(Decimal("1.50")) == "1.50"
    assert dump_converter("decimal(30,10)")(Decimal("-1E-10")) == "-0.0000000001"
    assert to_float32(0.10000000149011612) == 0.1 == to_float32(0.1)
    assert to_time(datetime.timedelta(days=-35, seconds=3601)) == "-838:59:59"
    assert to_time(datetime.timedelta(microseconds=-500000)) == "-00:00:00.500000"
    assert to_datetime(datetime.datetime(1, 2, 3, 4, 5, 6)) == "0001-02-03 04:05:06"
    assert to_datetime("0000-00-00 00:00:00") is None
    assert to_bit("0000001010") == 10 == to_bit(b"\x00\n")
    assert padded_hex(4)(b"ab") == "61620000"
    assert set_converter(("x", "y", "z"))({"z", "x"}) == "x,z"
    assert dump_converter("varbinary(4)")(b"\x00\xff") == "00ff"
    assert dump_converter("int(10) unsigned")(4294967295) == 4294967295


def test_json_fast_path_only_for_types_with_an_exact_json_form() -> None:
    assert json_expression("bigint(20)", None) == "{col}"
    assert json_expression("varchar(20)", "utf8mb4_general_ci") == "{col}"
    for column_type in ("float", "double", "time", "year(4)", "blob", "bit(3)", "json"):
        assert json_expression(column_type, None) is None
    assert json_expression("varchar(20)", "binary") is None
    assert json_expression("decimal(5,2)", None) == "CAST({col} AS CHAR)"


def test_ddl_statements_name_their_tables() -> None:
    assert parse_ddl("ALTER TABLE t ADD COLUMN x int", "db") == (Op.SCHEMA, [TableId("db", "t")])
    assert parse_ddl("/* c */ alter online table `o`.`t``x` add y int", "db") == (
        Op.SCHEMA, [TableId("o", "t`x")])
    assert parse_ddl("TRUNCATE TABLE other.t", "db") == (Op.TRUNCATE, [TableId("other", "t")])
    assert parse_ddl("DROP TABLE IF EXISTS a, b.c", "db") == (
        Op.SCHEMA, [TableId("db", "a"), TableId("b", "c")])
    assert parse_ddl("RENAME TABLE a TO b", "db")[1] == [TableId("db", "a"), TableId("db", "b")]
    assert parse_ddl("CREATE INDEX i ON t (x)", "db")[1] == [TableId("db", "t")]
    assert parse_ddl("CREATE USER x", "db") == (Op.SCHEMA, [])


def test_startup_checks_name_the_fix() -> None:
    good = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL",
            "binlog_row_metadata": "FULL"}
    assert check_binlog(good) == []
    bad = check_binlog({**good, "binlog_format": "MIXED", "binlog_row_image": "MINIMAL"})
    assert [f.level for f in bad] == ["error", "error"]
    assert "SET GLOBAL binlog_format = 'ROW'" in (bad[0].fix or "")
    assert "binlog_row_image" in (bad[1].fix or "")
    off = check_binlog({**good, "log_bin": "OFF"})
    assert off and "log_bin" in (off[0].fix or "")


def test_flavors() -> None:
    maria = detect("10.11.6-MariaDB-0+deb12u1-log", None)
    assert maria.mariadb and maria.gtid and "BINLOG MONITOR" in maria.required_rights()
    mysql = detect("8.0.36", "OFF")
    assert not mysql.mariadb and not mysql.gtid and mysql.current_position_sql() is None
    assert detect("8.4.0", "ON").status_sql() == "SHOW BINARY LOG STATUS"
    assert mysql_json_text({b"bb": 1, b"a": [1, None]}) == '{"a": [1, null], "bb": 1}'
