"""The API's request shapes: which table names pass validation (what the engine handles:
dots and spaces in a table's name, Unicode letters) and which never do (quotes, `;`)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dblog.api.models import DumpCreate
from dblog.core.model import TableId


@pytest.mark.parametrize("name", ["public.t_int", "public.order items", "sales.orders.2024",
                                  "ünï.cödé", "a$b.c-d", "s." + "t" * 64])
def test_table_names_the_engine_handles_pass(name: str) -> None:
    request = DumpCreate(tables=[name])
    assert request.tables == [name]
    assert str(TableId.parse(name)) == name


@pytest.mark.parametrize("name", ["public.t_int; DROP TABLE t_int", 't_int" ; DROP TABLE x',
                                  "public.`t`", "public.t'x", "notable", ".t", "s.",
                                  "s." + "t" * 65, "s.t\n"])
def test_names_a_statement_could_be_built_from_are_refused(name: str) -> None:
    with pytest.raises(ValidationError) as raised:
        DumpCreate(tables=[name])
    assert "tables.0" in str(raised.value)


@pytest.mark.parametrize(("low", "high"), [
    ([9], [10]), ([9.5], [10]), ([3, "k5"], [3, "k33"]), (["b"], ["a"]), (["9"], ["10"]),
    ([False], [True]), ([1, "z"], [2, "a"])])
def test_a_range_is_refused_only_when_reversed_whatever_the_collation(
        low: list[object], high: list[object]) -> None:
    body = DumpCreate.model_validate({"table": "public.t", "from": low, "to": high})
    assert body.kind == "range"


@pytest.mark.parametrize(("low", "high"), [([10], [9]), ([True], [False]), ([3, 5], [3, 4]),
                                           (["a", 2], ["a", 1])])
def test_a_reversed_range_of_numbers_or_booleans_is_refused(
        low: list[object], high: list[object]) -> None:
    with pytest.raises(ValidationError, match="is after"):
        DumpCreate.model_validate({"table": "public.t", "from": low, "to": high})
