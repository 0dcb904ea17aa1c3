"""Column type names as the catalogs give them, parsed once for the changelog formats.

PostgreSQL names come from ``format_type`` (``timestamp(3) without time zone``,
``character varying(20)``, ``integer[]``); MySQL/MariaDB names from ``COLUMN_TYPE``
(``int(10) unsigned``, ``datetime(6)``, ``enum('a','b')``). The formats map values by the
parsed kind, never by the value's shape, so a column's log and dump values map alike.
This module names no driver and imports no connector (formats work without the extras).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

Family = Literal["postgresql", "mysql"]

_PG_ARGS = re.compile(r"\(([^)]*)\)")
PG_INTS = frozenset({"smallint", "integer", "bigint", "int2", "int4", "int8", "oid"})
PG_FLOATS = frozenset({"real", "double precision", "float4", "float8"})
MY_INTS = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint"})
MY_TEXT = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext"})
MY_BINARY = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
MY_SPATIAL = frozenset({"geometry", "point", "linestring", "polygon", "multipoint",
                        "multilinestring", "multipolygon", "geometrycollection",
                        "geomcollection"})


@dataclass(frozen=True, slots=True)
class ColumnType:
    """``base``: the type without arguments (``timestamp without time zone``, ``int``);
    ``args``: its numeric arguments (length, precision, scale); ``element``: the element type
    of a PostgreSQL array."""

    family: Family
    text: str
    base: str
    args: tuple[int, ...] = ()
    unsigned: bool = False
    element: ColumnType | None = None

    @property
    def precision(self) -> int | None:
        """The first argument (fractional digits of temporal types, length of bit types), or
        None when the type has none (PostgreSQL's default precision of 6 is not assumed:
        unknown precision prints the digits the value has)."""
        return self.args[0] if self.args else None


@lru_cache(maxsize=4096)
def parse_type(family: Family, text: str) -> ColumnType:
    return _parse_pg(text) if family == "postgresql" else _parse_mysql(text)


def _parse_pg(text: str) -> ColumnType:
    name = text.strip()
    if name.endswith("[]"):
        element = _parse_pg(name[:-2].rstrip("[]").strip())
        return ColumnType("postgresql", text, "array", element=element)
    args: tuple[int, ...] = ()
    match = _PG_ARGS.search(name)
    if match is not None:
        args = tuple(int(a) for a in match.group(1).split(",") if a.strip().lstrip("-").isdigit())
        name = (name[:match.start()] + name[match.end():]).strip()
    name = " ".join(name.strip('"').split())
    return ColumnType("postgresql", text, name, args)


def _parse_mysql(text: str) -> ColumnType:
    lowered = text.strip().lower()
    base = lowered.split("(", 1)[0].split(" ", 1)[0].strip()
    args: tuple[int, ...] = ()
    if "(" in lowered and base not in ("enum", "set"):
        inside = lowered.split("(", 1)[1].split(")", 1)[0]
        args = tuple(int(a) for a in inside.split(",") if a.strip().isdigit())
    return ColumnType("mysql", text, base, args, unsigned=" unsigned" in lowered)
