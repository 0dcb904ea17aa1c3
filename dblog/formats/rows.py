"""Rows of canonical values to a format's values, column by column, through converters chosen
once per table from the column types (so a column maps alike in log and dump events)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from dblog.core.model import EncodedRow, Key, Row, RowImage, TableInfo
from dblog.errors import FatalOutputError

Converter = Callable[[Any], Any]
"""Maps one non-null canonical value."""


def _unknown(value: Any) -> Any:
    """The marker of a column the table's metadata does not have."""
    raise AssertionError("never called")


class RowMapper:
    """The converters of one table's columns (None: the canonical value is the format's)."""

    def __init__(self, format_name: str, info: TableInfo,
                 converters: Mapping[str, Converter | None]) -> None:
        self.format_name = format_name
        self.info = info
        self.converters = dict(converters)
        self.identity = all(c is None for c in self.converters.values())
        self._names = frozenset(self.converters)
        self._active = tuple((n, c) for n, c in self.converters.items() if c is not None)
        self._types = {c.name: c.type_name for c in info.columns}

    def image(self, image: RowImage) -> Any:
        """A row image as the format carries it; a pre-encoded dump row whose columns all map
        to themselves is embedded as is (an orjson fragment), without a decode."""
        if isinstance(image, EncodedRow):
            if self.identity:
                return orjson.Fragment(image.json)
            return self.values(image.decode())
        return self.values(image)

    def values(self, row: Row) -> dict[str, Any]:
        """The row with each non-null value of a converted column mapped (a copy)."""
        if not row.keys() <= self._names:
            self._unknown(row)
        out = dict(row)
        name = ""
        try:
            for name, convert in self._active:
                value = out.get(name)
                if value is not None:
                    out[name] = convert(value)
        except (ValueError, TypeError, OverflowError) as exc:
            raise FatalOutputError(
                f"{self.format_name}: cannot map {self.info.table}.{name} "
                f"({self._types.get(name)}) value {row.get(name)!r}: {exc}",
                fix="report this value: the format's type mapping does not cover it "
                    "(docs/formats.md)") from exc
        return out

    def key(self, key: Key) -> dict[str, Any]:
        """The key as an object of key columns, values mapped like the row's."""
        return self.values(dict(zip(self.info.key_columns, key, strict=True)))

    def _unknown(self, row: Row) -> None:
        name = sorted(row.keys() - self._names)[0]
        raise FatalOutputError(
            f"{self.format_name}: column {name!r} of {self.info.table} is not in the "
            "table's metadata, so its type (and value form) is unknown",
            fix="the output's table lookup must follow schema changes (refresh the table's "
                "metadata on its schema event)")
