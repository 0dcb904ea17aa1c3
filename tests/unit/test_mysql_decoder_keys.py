"""The row-key readers of the decoder's table plans: the same key as the generic reader."""

from __future__ import annotations

from typing import Any

import pytest

from dblog.connectors.mysql.collation import key_converter
from dblog.connectors.mysql.decoder import _key_reader


def _generic(key_at: list[tuple[str, Any]]) -> Any:
    """The key as the plan computed it for every table before the specialised readers."""
    def key_of(row: dict[str, Any]) -> Any:
        try:
            return tuple(row[k] if n is None else n(row[k]) for k, n in key_at)
        except KeyError:
            return None

    return key_of


@pytest.mark.parametrize("key_at", [
    [("id", None)],
    [("a", None), ("b", None)],
    [("k", key_converter("utf8mb4_general_ci")), ("id", None)],
    [("k", key_converter("utf8mb4_general_ci"))],
], ids=["one column", "two columns", "folded and plain", "folded"])
def test_key_readers_give_the_generic_key(key_at: list[tuple[str, Any]]) -> None:
    rows: list[dict[str, Any]] = [{"id": 7, "a": "x", "b": None, "k": "Straße ", "v": 1},
                                  {"id": None, "a": 1, "b": 2.5, "k": None},
                                  {"v": 1}]  # no key column: no key
    read = _key_reader(key_at)
    for row in rows:
        assert read(row) == _generic(key_at)(row)
    assert isinstance(read(rows[0]), tuple) and read(rows[2]) is None


def test_a_table_without_key_columns_has_no_keys() -> None:
    assert _key_reader([])({"id": 1}) is None
