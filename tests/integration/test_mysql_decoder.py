"""The connector's row decoder against a real MariaDB (issue 15): random rows of random schemas
(every supported type, NULLs, extreme values), written by the server into the binlog, decode to
the same values as the chunk SELECT reads, for insert images and both images of an update."""

from __future__ import annotations

import datetime
import decimal
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dblog.core.model import ChangeEvent, EncodedRow, Op, TableId

from .sources import Kit
from .workload import maria_connect

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Kind:
    sql: str  # the column type
    values: st.SearchStrategy[Any]  # parameter values
    placeholder: str = "%s"


def _ints(bits: int, unsigned: bool) -> st.SearchStrategy[int]:
    if unsigned:
        return st.sampled_from([0, 2**bits - 1]) | st.integers(0, 2**bits - 1)
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return st.sampled_from([low, high, 0, -1]) | st.integers(low, high)


def _decimal(precision: int, scale: int) -> Kind:
    limit = decimal.Decimal(10) ** (precision - scale) - decimal.Decimal(10) ** -scale
    values = st.decimals(-limit, limit, places=scale, allow_nan=False, allow_infinity=False)
    return Kind(f"decimal({precision},{scale})", values.map(str))


def _fsp_text(moment: datetime.datetime | datetime.timedelta, fsp: int) -> str:
    if isinstance(moment, datetime.timedelta):
        micros = int(moment / datetime.timedelta(microseconds=1))
        sign, micros = ("-" if micros < 0 else ""), abs(micros)
        seconds, fraction = divmod(micros, 1_000_000)
        text = f"{sign}{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    else:
        text, fraction = moment.strftime("%Y-%m-%d %H:%M:%S"), moment.microsecond
    return f"{text}.{fraction:06d}"[: len(text) + (fsp + 1 if fsp else 0)]


def _temporal(fsp: int) -> list[Kind]:
    suffix = f"({fsp})" if fsp else ""
    datetimes = st.datetimes(datetime.datetime(1000, 1, 1), datetime.datetime(9999, 12, 31))
    stamps = st.datetimes(datetime.datetime(1970, 1, 1, 0, 0, 1),
                          datetime.datetime(2038, 1, 19, 3, 14, 7))
    limit = datetime.timedelta(hours=838, minutes=59, seconds=59)
    return [Kind(f"datetime{suffix}", datetimes.map(lambda m: _fsp_text(m, fsp))
                 | st.sampled_from(["0000-00-00 00:00:00", "2024-00-10 01:02:03"])),
            Kind(f"timestamp{suffix} NULL", stamps.map(lambda m: _fsp_text(m, fsp))),
            Kind(f"time{suffix}", st.timedeltas(-limit, limit).map(lambda d: _fsp_text(d, fsp)))]


_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
_LATIN = st.text(st.sampled_from("azAZ09 äöüÜßéÉ!-"), max_size=10)
_BYTES = st.binary(max_size=12)
KINDS: list[Kind] = [
    *(Kind(f"{name}{' unsigned' if unsigned else ''}", _ints(bits, unsigned))
      for (name, bits), unsigned in itertools.product(
          [("tinyint", 8), ("smallint", 16), ("mediumint", 24), ("int", 32), ("bigint", 64)],
          [False, True])),
    _decimal(10, 2), _decimal(5, 0), _decimal(30, 10), _decimal(65, 30), _decimal(18, 9),
    Kind("float", st.floats(width=32, allow_nan=False, allow_infinity=False)),
    Kind("double", st.floats(allow_nan=False, allow_infinity=False)),
    Kind("date", st.dates(datetime.date(1000, 1, 1)).map(str)
         | st.sampled_from(["0000-00-00", "2024-00-15", "2024-02-00"])),
    *_temporal(0), *_temporal(3), *_temporal(6), *_temporal(1), *_temporal(4),
    Kind("year", st.sampled_from([0, 1901, 2155]) | st.integers(1901, 2155)),
    Kind("char(6)", _TEXT.map(lambda t: t[:6])), Kind("varchar(300)", _TEXT),
    Kind("varchar(10) CHARACTER SET latin1", _LATIN), Kind("text", _TEXT),
    Kind("varchar(10) CHARACTER SET utf16", _TEXT.map(lambda t: t[:10])),
    Kind("binary(5)", _BYTES.map(lambda b: b[:5])), Kind("varbinary(300)", _BYTES),
    Kind("blob", _BYTES), Kind("enum('a','b','c d')", st.sampled_from(["a", "b", "c d"])),
    Kind("set('x','y','z')", st.sets(st.sampled_from("xyz")).map(lambda s: ",".join(s))),
    Kind("bit(1)", st.integers(0, 1)), Kind("bit(13)", st.integers(0, 2**13 - 1)),
    Kind("bit(64)", st.integers(0, 2**64 - 1)),
    Kind("json", st.dictionaries(st.text(max_size=3), st.integers() | _TEXT, max_size=3)
         .map(lambda d: json.dumps(d, ensure_ascii=False))
         | st.sampled_from(['{"k": 1, "k": "é"}', '[1, 2.50, {"a" : null}]'])),
    Kind("uuid", st.uuids().map(str)), Kind("inet4", st.ip_addresses(v=4).map(str)),
    Kind("inet6", st.ip_addresses(v=6).map(str)),
    Kind("point", st.tuples(st.floats(-1e9, 1e9), st.floats(-1e9, 1e9))
         .map(lambda p: f"POINT({p[0]!r} {p[1]!r})"), "ST_GeomFromText(%s)"),
]
_names = (f"dec_{n}" for n in itertools.count())


@st.composite
def tables(draw: Callable[..., Any]) -> tuple[list[Kind], list[list[Any]]]:
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=8))
    rows = draw(st.lists(st.tuples(*(st.none() | k.values for k in kinds)).map(list),
                         min_size=1, max_size=6))
    return kinds, rows


def _log_images(kit: Kit, table: TableId, start: Any, expected: int) -> list[ChangeEvent]:
    from dblog.connectors.mysql import MysqlConnector

    connector = MysqlConnector({**kit.source_config("decoder"), "tables": [str(table)]}, "dec")
    reader = connector.log_reader()
    reader.start(start)
    events: list[ChangeEvent] = []
    deadline = time.monotonic() + 20
    try:
        while len(events) < expected and time.monotonic() < deadline:
            events += [i for i in reader.poll(0.2) if isinstance(i, ChangeEvent)
                       and i.table == table and i.op in (Op.INSERT, Op.UPDATE)]
    finally:
        reader.close()
        connector.close()
    return events


def _dump_rows(kit: Kit, table: TableId) -> dict[Any, Any]:
    reader = kit.chunk_reader()
    try:
        info = reader.table_info(table)
        rows = reader.read_chunk(info, None, None, 10**6).rows
    finally:
        reader.close()
    return {k: (r.decode() if isinstance(r, EncodedRow) else r) for k, r in rows}


@pytest.fixture()
def maria(maria_dsn: str) -> Kit:
    return Kit("mariadb", maria_dsn)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(schema=tables())
def test_binlog_rows_decode_to_the_chunk_select_values(
        maria: Kit, schema: tuple[list[Kind], list[list[Any]]]) -> None:
    kinds, rows = schema
    name = next(_names)
    columns = ", ".join(f"c{i} {k.sql}" for i, k in enumerate(kinds))
    maria.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, {columns})")
    table = TableId(maria.schema, name)
    start = maria.current_position()
    marks = ", ".join(["%s", *(k.placeholder for k in kinds)])
    conn = maria_connect(maria.dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")  # zero dates; out-of-range would warn
            for key, row in enumerate(rows):
                cur.execute(f"INSERT INTO {name} VALUES ({marks})", [key, *row])
            dumped = _dump_rows(maria, table)
            cur.execute(f"UPDATE {name} SET id = id + 1000")
    finally:
        conn.close()
    events = _log_images(maria, table, start, 2 * len(rows))
    inserts = {e.key: e.after for e in events if e.op is Op.INSERT}
    updates = {e.old_key: e for e in events if e.op is Op.UPDATE}
    assert set(inserts) == set(dumped) == set(updates), (inserts, dumped)
    for key, row in dumped.items():
        assert inserts[key] == row, (key, kinds)
        assert updates[key].before == row and updates[key].after == {
            **row, "id": row["id"] + 1000}, (key, kinds)


def test_the_type_pool_covers_every_value_family() -> None:
    sql = " ".join(k.sql for k in KINDS)
    for family in ("uuid", "inet4", "inet6", "point", "json", "bit", "enum", "set", "time(6)",
                   "timestamp(3)", "decimal(65,30)", "utf16", "latin1", "binary", "year"):
        assert family in sql, family
