"""Chunk bounds the server compares as the key's own ORDER BY does: ENUM and SET keys bound as
their numbers, FLOAT keys as 32-bit floats; keys with a zero date are refused, not skipped."""

from __future__ import annotations

from typing import Any

import pytest

from dblog.connectors.mysql.chunks import _Queries
from dblog.core.model import ColumnInfo, TableId, TableInfo
from dblog.errors import DumpRequestError, TableChanged


def _queries(*columns: tuple[str, str], keys: tuple[str, ...] = ("k",),
             collations: dict[str, str] | None = None) -> _Queries:
    info = TableInfo(TableId("db", "t"), tuple(ColumnInfo(n, t) for n, t in columns), keys,
                     extra={"collations": collations or {}})
    return _Queries(info, 0)


def test_enum_bounds_are_label_indexes() -> None:
    q = _queries(("k", "enum('b','a','c')"), ("v", "int"),
                 collations={"k": "utf8mb4_general_ci"})
    sql, params = q.chunk(("A",), ("C",), 10)  # folded labels, as the key reader gives them
    assert "`k` > %s" in sql and "`k` <= %s" in sql
    assert params == [2, 3, 10]
    assert q.params(("",)) == [0]  # the invalid value '' stored under a lax sql_mode


def test_an_empty_label_of_the_enum_is_bound_as_its_index() -> None:
    q = _queries(("k", "enum('a','')"), ("v", "int"), collations={"k": "utf8mb4_bin"})
    assert q.params(("",)) == [2] and q.params(("a",)) == [1]


def test_set_bounds_are_bit_values() -> None:
    q = _queries(("k", "set('x','w','y')"), ("v", "int"), collations={"k": "utf8mb4_bin"})
    assert q.params(("w,y",)) == [6] and q.params(("",)) == [0] and q.params(("x",)) == [1]


def test_a_label_the_enum_lost_is_a_table_change() -> None:
    q = _queries(("k", "enum('b','a')"), ("v", "int"))
    with pytest.raises(TableChanged):
        q.params(("gone",))


def test_float_bounds_are_cast_to_float() -> None:
    q = _queries(("k", "float"), ("id", "int"), keys=("k", "id"))
    sql, params = q.chunk((0.1, 1), (0.3, 9), 5)
    assert ("`db`.`t`.`k` >= CAST(%s AS FLOAT) AND (`db`.`t`.`k`, `db`.`t`.`id`) > "
            "(CAST(%s AS FLOAT), %s)") in sql
    assert "(`db`.`t`.`k`, `db`.`t`.`id`) <= (CAST(%s AS FLOAT), %s)" in sql
    assert params == [0.1, 0.1, 1, 0.3, 9, 5]
    single = _queries(("k", "float"), ("v", "int"))
    assert "`db`.`t`.`k` > CAST(%s AS FLOAT)" in single.chunk((0.1,), None, 5)[0]
    assert _queries(("k", "double")).chunk((0.1,), None, 5)[0].count("CAST(%s") == 0


def test_zero_date_keys_are_refused() -> None:
    q = _queries(("k", "datetime"), ("v", "int"))
    rows: list[Any] = [(("2024-01-01 00:00:00",), {}), ((None,), {})]
    with pytest.raises(DumpRequestError, match="zero date") as caught:
        q.check_keys(rows)
    assert "source.key_columns" in (caught.value.fix or "")
    assert q.check_keys(rows[:1]) == rows[:1]
