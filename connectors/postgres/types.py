"""Canonical values for PostgreSQL columns, shared by log events and chunk rows.

Both paths start from PostgreSQL's own text output (wal2json prints values with the type's
output function; chunk SELECTs cast every column to ``text``), with DateStyle ISO and TimeZone
UTC on every connection, so one converter per type gives identical values on both paths:

============================  ===================================================
PostgreSQL type               canonical JSON value
============================  ===================================================
smallint, integer, bigint     integer
boolean                       true / false
real, double precision        number; NaN and +-Infinity become null (wal2json prints null)
numeric                       string, exactly as PostgreSQL prints it (``"1.50"``); NaN and
                              +-Infinity become null, as wal2json prints them
bytea                         string, lowercase hex without the ``\\x`` prefix
json, jsonb                   string (the document's text)
everything else               string in PostgreSQL's ISO text output (timestamps, dates,
                              uuid, text, arrays, enums, ...)
============================  ===================================================
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

Converter = Callable[[Any], Any]

INT_TYPES = frozenset({"smallint", "integer", "bigint", "int2", "int4", "int8", "oid"})
FLOAT_TYPES = frozenset({"real", "double precision", "float4", "float8"})
_INF = float("inf")


def _to_int(value: Any) -> Any:
    return value if value is None or type(value) is int else int(value)


def _to_bool(value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value
    return value in ("t", "true")


def _to_float(value: Any) -> Any:
    # wal2json prints NaN and +-Infinity as JSON null, so the dump side maps them to null too
    if value is None:
        return None
    number = float(value)
    if number != number or number in (_INF, -_INF):
        return None
    return number


def _to_numeric(value: Any) -> Any:
    if value is None:
        return None
    text = value if type(value) is str else str(value)
    return None if text in ("NaN", "Infinity", "-Infinity") else text


def _to_hex(value: Any) -> Any:
    if value is None:
        return None
    return value[2:] if value.startswith("\\x") else value


def _to_str(value: Any) -> Any:
    return value if value is None or type(value) is str else str(value)


def base_type(type_name: str) -> str:
    """``character varying(20)`` -> ``character varying``; arrays keep their ``[]``."""
    name = type_name.strip('"')
    paren = name.find("(")
    if paren >= 0:
        close = name.find(")", paren)
        name = (name[:paren] + name[close + 1 :]).strip()
    return name


@lru_cache(maxsize=1024)
def converter_for(type_name: str) -> Converter:
    name = base_type(type_name)
    if name.endswith("[]"):
        return _to_str
    if name in INT_TYPES:
        return _to_int
    if name == "boolean" or name == "bool":
        return _to_bool
    if name in FLOAT_TYPES:
        return _to_float
    if name == "bytea":
        return _to_hex
    if name == "numeric":
        return _to_numeric
    return _to_str


def key_param(type_name: str, value: Any) -> Any:
    """A canonical key value as a query parameter (cast to the column type in SQL)."""
    if value is None:
        return None
    if base_type(type_name) == "bytea":
        return "\\x" + value
    return str(value) if not isinstance(value, bool) else ("t" if value else "f")


# types whose cast to text has no cast function: it is the output function itself (cheaper on
# the server than concat())
_TEXT_VIA_OUTPUT = frozenset({
    "timestamp with time zone", "timestamp without time zone", "timestamptz", "timestamp",
    "date", "time without time zone", "time with time zone", "time", "timetz", "interval",
    "uuid", "json", "jsonb",
})


def select_expression(type_name: str) -> str:
    """SQL that makes the server return a column so that psycopg's default loaders yield the
    canonical value with no Python conversion (``{col}`` is the quoted column)."""
    name = base_type(type_name)
    if name in INT_TYPES or name in ("boolean", "bool"):
        return "{col}"
    if name in FLOAT_TYPES:
        return "CASE WHEN {col} IN ('NaN', 'Infinity', '-Infinity') THEN NULL ELSE {col} END"
    if name == "numeric":
        return "NULLIF(NULLIF(NULLIF({col}::text, 'NaN'), 'Infinity'), '-Infinity')"
    if name == "bytea":
        return "encode({col}, 'hex')"
    if name in ("text", "character varying", "varchar") or name in _TEXT_VIA_OUTPUT:
        return "{col}::text"
    # concat() prints through the type's output function, as wal2json does; a cast to text may
    # differ (char(n) loses its padding, inet gains a netmask)
    return "CASE WHEN {col} IS NULL THEN NULL ELSE concat({col}) END"
