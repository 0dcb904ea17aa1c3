"""``dblog dump``'s keys and ranges given as comma-separated values: numbers, booleans and
null are sent as JSON values, anything else as text, and the API's model accepts the body."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from dblog.api.models import DumpCreate
from dblog.app.cli_control import _dump_body, add_commands


def body_of(*argv: str) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(dest="command"))
    return _dump_body(parser.parse_args(["dump", "-c", "x.yaml", "-t", "public.t", *argv]))


def test_a_numeric_range_is_sent_as_numbers_and_accepted() -> None:
    body = body_of("--from", "9", "--to", "10")
    assert body == {"table": "public.t", "from": [9], "to": [10]}
    assert DumpCreate.model_validate(body).kind == "range"


@pytest.mark.parametrize(("text", "values"), [
    ("3,k33", [3, "k33"]), ("1.5, true, null", [1.5, True, None]), ('"9",x', ["9", "x"]),
    ("007,1e3,1.50,NaN,-0", ["007", "1e3", "1.50", "NaN", "-0"]),  # text as typed
    ('[3, "k5"]', [3, "k5"])])
def test_comma_separated_values_are_json_scalars_where_they_are_ones(
        text: str, values: list[Any]) -> None:
    assert body_of("--from", text)["from"] == values


def test_keys_are_parsed_the_same_way() -> None:
    assert body_of("--keys", "1,2,x")["keys"] == [[1], [2], ["x"]]
