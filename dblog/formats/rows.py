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


class UnknownColumns(FatalOutputError):
    """A row holds columns its table's metadata does not have: the metadata is older than
    the row (a column added since it was read) or newer (dropped or renamed since the row
    was logged). :func:`dblog.formats.schema.encode_following_schema` tells them apart."""

    def __init__(self, format_name: str, table: object, columns: frozenset[str]) -> None:
        super().__init__(
            f"{format_name}: column(s) {sorted(columns)} of {table} are not in the table's "
            "metadata, so their type (and value form) is unknown",
            fix="the output's table lookup must follow schema changes (refresh the table's "
                "metadata on its schema event)")
        self.columns = columns


class UnmappableValue(FatalOutputError):
    """A value does not fit its column's type in the table's metadata: the metadata may be
    older than the value (a type changed while the pipeline runs)."""


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
            raise UnmappableValue(
                f"{self.format_name}: cannot map {self.info.table}.{name} "
                f"({self._types.get(name)}) value {row.get(name)!r}: {exc}",
                fix="if the column's type changed since this value was logged, start the "
                    "pipeline past that point and dump the table; otherwise report this "
                    "value: the format's type mapping does not cover it (docs/formats.md)"
            ) from exc
        return out

    def key(self, key: Key) -> dict[str, Any]:
        """The key as an object of key columns, values mapped like the row's."""
        return self.values(dict(zip(self.info.key_columns, key, strict=True)))

    def _unknown(self, row: Row) -> None:
        raise UnknownColumns(self.format_name, self.info.table,
                             frozenset(row.keys() - self._names))

    def check(self, image: RowImage | None) -> None:
        """Raise :class:`UnknownColumns` if a row image (not a pre-encoded dump row) has a
        column this mapper does not know."""
        if isinstance(image, dict) and not image.keys() <= self._names:
            self._unknown(image)

    def tolerating(self, columns: frozenset[str]) -> RowMapper:
        """This mapper, also passing ``columns`` through as captured (columns the current
        metadata no longer has: their type is unknown)."""
        return RowMapper(self.format_name, self.info,
                         {**dict.fromkeys(columns), **self.converters})
