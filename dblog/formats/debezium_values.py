"""Canonical values to the values Debezium's connectors put in ``before``/``after`` with
``decimal.handling.mode=string``, ``binary.handling.mode=bytes`` (base64 in JSON),
``time.precision.mode`` at its default (PostgreSQL ``adaptive``, MySQL
``adaptive_time_microseconds``) and ``interval.handling.mode=string``. The table per source is
in docs/formats.md; departures (exact BIGINT UNSIGNED, PostgreSQL types Debezium maps to
structs) are listed there.
"""

from __future__ import annotations

import base64
from typing import Any

from dblog.formats.coltypes import (
    MY_BINARY,
    MY_SPATIAL,
    PG_FLOATS,
    PG_INTS,
    ColumnType,
)
from dblog.formats.rows import Converter
from dblog.formats.temporal import (
    INT64_MAX,
    INT64_MIN,
    epoch_days,
    epoch_micros,
    interval_iso,
    iso_time,
    time_micros,
    utc_time_micros,
    zoned_iso,
)


def hex_to_base64(value: Any) -> str:
    return base64.b64encode(bytes.fromhex(value)).decode("ascii")


def _bits(value: int, length: int) -> str:
    """io.debezium.data.Bits: the bits little-endian in ceil(length/8) bytes, base64."""
    return base64.b64encode(value.to_bytes((length + 7) // 8, "little")).decode("ascii")


def _pg_bits(value: Any) -> Any:
    return _bits(int(value, 2) if value else 0, len(value))


def _pg_bit1(value: Any) -> Any:
    return value == "1"


def _micros_or_millis(precision: int | None, infinite: bool) -> Converter:
    """TIMESTAMP (adaptive): epoch milliseconds up to precision 3, else microseconds."""
    millis = precision is not None and precision <= 3

    def convert(value: Any) -> Any:
        if infinite and value in ("infinity", "-infinity"):
            return INT64_MAX if value == "infinity" else INT64_MIN
        micros = epoch_micros(value)
        return micros // 1000 if millis else micros

    return convert


def _zoned_timestamp(precision: int | None) -> Converter:
    def convert(value: Any) -> Any:
        if value in ("infinity", "-infinity"):
            return value
        return zoned_iso(value, precision)

    return convert


def _pg_time(precision: int | None) -> Converter:
    millis = precision is not None and precision <= 3

    def convert(value: Any) -> Any:
        micros = time_micros(value)
        return micros // 1000 if millis else micros

    return convert


def _zoned_time(precision: int | None) -> Converter:
    return lambda value: iso_time(utc_time_micros(value), precision)


def _money(value: Any) -> Any:
    """``$1,234.50`` / ``-$1.50`` as a decimal string (Debezium maps money to a decimal)."""
    text = str(value).replace(",", "").replace("$", "")
    if text.startswith("(") and text.endswith(")"):
        text = "-" + text[1:-1]
    float(text)  # raises for a currency format this does not know (lc_monetary)
    return text


_PG_TEMPORAL = {
    "date": lambda ct: epoch_days,
    "time without time zone": lambda ct: _pg_time(ct.precision),
    "time": lambda ct: _pg_time(ct.precision),
    "time with time zone": lambda ct: _zoned_time(ct.precision),
    "timetz": lambda ct: _zoned_time(ct.precision),
    "timestamp without time zone": lambda ct: _micros_or_millis(ct.precision, True),
    "timestamp": lambda ct: _micros_or_millis(ct.precision, True),
    "timestamp with time zone": lambda ct: _zoned_timestamp(ct.precision),
    "timestamptz": lambda ct: _zoned_timestamp(ct.precision),
    "interval": lambda ct: interval_iso,
}


def postgres_converter(ct: ColumnType) -> Converter | None:
    base = ct.base
    if base in PG_INTS or base in PG_FLOATS or base in ("boolean", "bool", "numeric",
                                                         "decimal"):
        return None
    if base == "array":
        assert ct.element is not None
        return array_converter(ct.element)
    if base in _PG_TEMPORAL:
        factory: Any = _PG_TEMPORAL[base]
        converter: Converter = factory(ct)
        return converter
    if base == "bytea":
        return hex_to_base64
    if base == "money":
        return _money
    if base == "bit":
        return _pg_bit1 if (ct.precision or 1) == 1 else _pg_bits
    if base in ("bit varying", "varbit"):
        return _pg_bits
    return None  # text, varchar, char, json, jsonb, uuid, xml, inet, enums, ranges, ...


def array_converter(element: ColumnType) -> Converter:
    """A PostgreSQL array literal (the canonical value) as a JSON array of the element type's
    Debezium values (nested for multi-dimensional arrays)."""
    canonical = _pg_element(element)
    convert = postgres_converter(element)

    def each(item: Any) -> Any:
        if isinstance(item, list):
            return [each(i) for i in item]
        if item is None:
            return None
        value = canonical(item)
        return value if value is None or convert is None else convert(value)

    return lambda value: each(parse_array(value))


def _pg_element(element: ColumnType) -> Converter:
    """An array element's text as the canonical value of its type (connectors/postgres)."""
    base = element.base
    if base in PG_INTS:
        return int
    if base in ("boolean", "bool"):
        return lambda text: text in ("t", "true")
    if base in PG_FLOATS:
        return lambda text: None if text in ("NaN", "Infinity", "-Infinity") else float(text)
    if base in ("numeric", "decimal"):
        return lambda text: None if text in ("NaN", "Infinity", "-Infinity") else text
    if base == "bytea":
        return lambda text: text[2:] if text.startswith("\\x") else text
    return lambda text: text


def parse_array(text: str) -> list[Any]:
    """PostgreSQL's array output (``{1,NULL,"a b","q\\"x"}``, nested braces for more
    dimensions, an optional ``[1:2]=`` bounds prefix) as nested lists of element texts."""
    if text.startswith("["):
        text = text[text.index("=") + 1:]
    items, end = _parse_level(text, 0)
    if end != len(text):
        raise ValueError(f"not an array literal: {text!r}")
    return items


def _parse_level(text: str, i: int) -> tuple[list[Any], int]:
    if text[i] != "{":
        raise ValueError(f"not an array literal: {text!r}")
    items: list[Any] = []
    i += 1
    if text[i] == "}":
        return items, i + 1
    while True:
        if text[i] == "{":
            sub, i = _parse_level(text, i)
            items.append(sub)
        elif text[i] == '"':
            chars, i = [], i + 1
            while text[i] != '"':
                if text[i] == "\\":
                    i += 1
                chars.append(text[i])
                i += 1
            items.append("".join(chars))
            i += 1
        else:
            start = i
            while text[i] not in ",}":
                i += 1
            token = text[start:i]
            items.append(None if token == "NULL" else token)
        i += 1
        if text[i - 1] == "}":
            return items, i


def _my_bit(length: int) -> Converter:
    if length == 1:
        return bool
    return lambda value: _bits(int(value), length)


def _geometry(value: Any) -> Any:
    """io.debezium.data.geometry.Geometry: the WKB (base64) and the SRID, from the canonical
    hex of MySQL's stored value (4-byte little-endian SRID, then the WKB)."""
    raw = bytes.fromhex(value)
    return {"wkb": base64.b64encode(raw[4:]).decode("ascii"),
            "srid": int.from_bytes(raw[:4], "little")}


def _my_datetime(precision: int | None) -> Converter:
    return _micros_or_millis(precision or 0, False)


def mysql_converter(ct: ColumnType) -> Converter | None:
    base = ct.base
    if base == "date":
        return epoch_days
    if base == "datetime":
        return _my_datetime(ct.precision)
    if base == "timestamp":
        precision = ct.precision or 0
        return lambda value: zoned_iso(value, precision)
    if base == "time":
        return time_micros
    if base == "bit":
        return _my_bit(ct.precision or 1)
    if base in MY_BINARY:
        return hex_to_base64
    if base in MY_SPATIAL:
        return _geometry
    return None  # integers (any sign), year, decimal, float, double, text, enum, set, json,
    # MariaDB uuid/inet4/inet6


def debezium_converter(ct: ColumnType) -> Converter | None:
    return postgres_converter(ct) if ct.family == "postgresql" else mysql_converter(ct)
