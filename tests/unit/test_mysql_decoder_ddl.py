"""The decoder across DDL: a new table map never reuses the plan of an older table version,
and DDL statements MariaDB logs with a ``SET STATEMENT ... FOR`` prefix are recognised."""

from __future__ import annotations

from types import SimpleNamespace as NS
from typing import Any

from dblog.connectors.mysql.decoder import BinlogDecoder, parse_ddl
from dblog.connectors.mysql.flavor import Flavor
from dblog.core.model import Op, TableId

_FLAVOR = Flavor("mariadb", (10, 11), True)


def _decoder() -> BinlogDecoder:
    return BinlogDecoder("i", TableId("dblog", "watermark"), _FLAVOR, ["db.*"],
                         lambda table, fresh: ("id",))


def _event(table: str, *columns: Any) -> Any:
    return NS(schema="db", table=table, columns=list(columns))


def _int(name: str, unsigned: bool) -> Any:
    return NS(name=name, type=3, unsigned=unsigned, charset_id=None, collation_name=None)


def _varchar(max_length: int) -> Any:
    return NS(name="v", type=15, unsigned=False, max_length=max_length,
              character_set_name="utf8mb4", collation_name="utf8mb4_general_ci")


def _decode(decoder: BinlogDecoder, event: Any, data: bytes) -> list[dict[str, Any]]:
    plan = decoder.plan_for(event)
    assert plan is not None and plan.codec is not None
    return plan.codec.decode(data, 0, len(data))


def test_int_made_unsigned_gets_a_new_plan() -> None:
    decoder = _decoder()
    image = bytes([0]) + (1).to_bytes(4, "little") + b"\xff\xff\xff\xff"
    assert _decode(decoder, _event("t", _int("id", False), _int("n", False)), image) == [
        {"id": 1, "n": -1}]
    assert _decode(decoder, _event("t", _int("id", False), _int("n", True)), image) == [
        {"id": 1, "n": 4294967295}]


def test_varchar_widened_past_255_reads_a_two_byte_length() -> None:
    decoder = _decoder()
    short = bytes([0]) + (1).to_bytes(4, "little") + bytes([2]) + b"ab"
    assert _decode(decoder, _event("t", _int("id", False), _varchar(40)), short) == [
        {"id": 1, "v": "ab"}]
    wide = bytes([0]) + (2).to_bytes(4, "little") + (300).to_bytes(2, "little") + b"x" * 300
    assert _decode(decoder, _event("t", _int("id", False), _varchar(1200)), wide) == [
        {"id": 2, "v": "x" * 300}]


def test_enum_labels_changed_gets_a_new_plan() -> None:
    decoder = _decoder()
    old = NS(name="e", type=247, unsigned=False, enum_values=["a", "b"], size=1,
              collation_name=None)
    new = NS(name="e", type=247, unsigned=False, enum_values=["b", "a"], size=1,
              collation_name=None)
    first = decoder.plan_for(_event("t", _int("id", False), old))
    assert decoder.plan_for(_event("t", _int("id", False), new)) is not first
    assert decoder.plan_for(_event("t", _int("id", False), old)) is first


def test_set_statement_prefix_is_recognised() -> None:
    assert parse_ddl("SET STATEMENT lock_wait_timeout=5 FOR ALTER TABLE t MODIFY n INT "
                     "UNSIGNED", "db") == (Op.SCHEMA, [TableId("db", "t")])
    assert parse_ddl("set statement max_statement_time=10, sql_mode='NO_ZERO_DATE,STRICT' "
                     "for truncate table o.t", "db") == (Op.TRUNCATE, [TableId("o", "t")])
    assert parse_ddl("/* x */ SET STATEMENT a='for' FOR DROP TABLE `a b`", "db") == (
        Op.SCHEMA, [TableId("db", "a b")])


def test_ddl_written_in_another_case_reaches_the_logged_table() -> None:
    """lower_case_table_names=1: the table map names ``db.t``, the statement ``DB.T``."""
    decoder = _decoder()
    event = _event("t", _int("id", False), _int("n", False))
    plan = decoder.plan_for(event)
    items = decoder.ddl("ALTER TABLE DB.T MODIFY n INT UNSIGNED", "db", None, 1, None)  # type: ignore[arg-type]
    assert TableId("db", "t") in [getattr(i, "table", None) for i in items]
    assert decoder.plan_for(event) is not plan
