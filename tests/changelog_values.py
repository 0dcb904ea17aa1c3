"""Test-side reverse value mappings: what a consumer that knows only Debezium's and Canal's
published value definitions (and the source table's DDL) writes back into a replica of the
source, in dblog's canonical form (docs/formats.md), so rebuilt tables compare with the source.

Written from the published definitions, not from dblog's encoder: Debezium's semantic types
(io.debezium.time.Date = days since the epoch; Timestamp = epoch milliseconds for precision up
to 3 under time.precision.mode=adaptive, MicroTimestamp = epoch microseconds otherwise;
MicroTime = microseconds of the day; ZonedTimestamp/ZonedTime = ISO-8601 strings; BYTES =
base64; io.debezium.data.Bits = little-endian bytes; decimal.handling.mode=string = decimal
text; interval.handling.mode=string = ``P..Y..M..DT..H..M..S``) and Canal's flat message (every
value a string, ``sqlType`` a java.sql.Types code).
"""

from __future__ import annotations

import base64
import datetime
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

Reverse = Callable[[Any], Any]
_EPOCH = datetime.datetime(1970, 1, 1)
_INT32_MAX, _INT64_MAX = 2**31 - 1, 2**63 - 1


def type_parts(type_name: str) -> tuple[str, int | None, bool]:
    """(base name, first numeric argument, unsigned) of a catalog type name, either source."""
    text = type_name.strip().lower()
    match = re.search(r"\((\d+)", text)
    argument = int(match.group(1)) if match else None
    base = re.sub(r"\([^)]*\)", "", text).replace(" unsigned", "").replace(" zerofill", "")
    return " ".join(base.split()), argument, " unsigned" in text


def _fraction(micros: int, trim: bool) -> str:
    if not micros:
        return ""
    text = f"{micros:06d}"
    return "." + (text.rstrip("0") if trim else text)


def micros_text(micros: int, trim: bool) -> str:
    """Epoch microseconds as ``YYYY-MM-DD HH:MM:SS[.f]`` (PostgreSQL trims the fraction's
    trailing zeros, the MySQL connector prints six digits)."""
    moment = _EPOCH + datetime.timedelta(microseconds=micros)
    return moment.strftime("%Y-%m-%d %H:%M:%S") + _fraction(moment.microsecond, trim)


def iso_to_micros(text: str) -> int:
    moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (moment - _EPOCH.replace(tzinfo=datetime.timezone.utc)) // datetime.timedelta(
        microseconds=1)


def time_text(micros: int, trim: bool) -> str:
    sign = "-" if micros < 0 else ""
    seconds, fraction = divmod(abs(micros), 1_000_000)
    return (f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
            f"{_fraction(fraction, trim)}")


def date_text(days: int) -> str:
    if days == _INT32_MAX:
        return "infinity"
    if days == -_INT32_MAX - 1:
        return "-infinity"
    return (datetime.date(1970, 1, 1) + datetime.timedelta(days=days)).isoformat()


def unbase64_hex(text: str) -> str:
    return base64.b64decode(text).hex()


def bits_int(text: str) -> int:
    return int.from_bytes(base64.b64decode(text), "little")


def timetz_utc(text: str) -> str:
    """A PostgreSQL timetz as the same instant of the day in UTC (``08:00:00+00``): Debezium's
    ZonedTime keeps the instant, not the writer's offset."""
    match = re.match(r"^(\d\d):(\d\d):(\d\d)(\.\d+)?([+-]\d\d)(?::(\d\d))?$", text)
    assert match, text
    h, m, s, fraction, offset_h, offset_m = match.groups()
    sign = -1 if offset_h.startswith("-") else 1
    offset = sign * (abs(int(offset_h)) * 60 + int(offset_m or 0))
    minutes = (int(h) * 60 + int(m) - offset) % 1440
    return f"{minutes // 60:02d}:{minutes % 60:02d}:{s}{fraction or ''}+00"


def interval_parts(text: str) -> tuple[int, int, int, Decimal]:
    """Years, months, days and seconds of a PostgreSQL (``postgres`` style) or ISO-8601
    interval, for comparing the two forms."""
    if text.startswith("P"):
        match = re.match(r"^P(-?\d+)Y(-?\d+)M(-?\d+)DT(-?\d+)H(-?\d+)M(-?[\d.]+)S$", text)
        assert match, text
        y, mo, d, h, mi, s = match.groups()
        return int(y), int(mo), int(d), int(h) * 3600 + int(mi) * 60 + Decimal(s)
    units = {"year": 0, "mon": 0, "day": 0}
    seconds = Decimal(0)
    for number, unit, clock in re.findall(r"([+-]?\d+) (year|mon|day)s?|([+-]?[\d:.]+)", text):
        if clock:
            sign = -1 if clock.startswith("-") else 1
            h, mi, s = clock.lstrip("+-").split(":")
            seconds = sign * (int(h) * 3600 + int(mi) * 60 + Decimal(s))
        else:
            units[unit] = int(number)
    return units["year"], units["mon"], units["day"], seconds


def money_text(text: str) -> str:
    value = Decimal(text)
    return f"{'-' if value < 0 else ''}${abs(value):,.2f}"


def pg_array_literal(items: list[Any], element: Reverse) -> str:
    """A JSON array as PostgreSQL prints the array (quoted elements where needed)."""
    def render(item: Any) -> str:
        if isinstance(item, list):
            return "{" + ",".join(render(i) for i in item) + "}"
        if item is None:
            return "NULL"
        text = str(element(item))
        if text == "" or text.upper() == "NULL" or re.search(r'[\s{},"\\]', text):
            return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return text

    return render(items)


def _pg_reverse(base: str, argument: int | None) -> Reverse:
    millis = argument is not None and argument <= 3
    table: dict[str, Reverse] = {
        "bytea": unbase64_hex, "date": date_text, "money": money_text,
        "time without time zone": lambda v: time_text(v * 1000 if millis else v, True),
        "time with time zone": lambda v: v.replace("Z", "+00"),
        "timestamp without time zone": lambda v: "infinity" if v == _INT64_MAX
        else "-infinity" if v == -_INT64_MAX - 1 else micros_text(v * 1000 if millis else v,
                                                                   True),
        "timestamp with time zone": lambda v: v if "infinity" in v
        else micros_text(iso_to_micros(v), True) + "+00",
        "interval": interval_parts,
        "bit": (lambda v: "1" if v else "0") if (argument or 1) == 1
        else lambda v: format(bits_int(v), f"0{argument}b"),
    }
    return table.get(base, lambda v: v)


def _mysql_reverse(base: str, argument: int | None) -> Reverse:
    millis = (argument or 0) <= 3
    binary = ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")
    if base in binary:
        return unbase64_hex
    if base in ("point", "geometry", "linestring", "polygon"):
        return lambda v: (v["srid"].to_bytes(4, "little") + base64.b64decode(v["wkb"])).hex()
    table: dict[str, Reverse] = {
        "date": date_text, "time": lambda v: time_text(v, False),
        "datetime": lambda v: micros_text(v * 1000 if millis else v, False),
        "timestamp": lambda v: micros_text(iso_to_micros(v), False),
        "bit": (lambda v: int(v)) if (argument or 1) == 1 else bits_int,
    }
    return table.get(base, lambda v: v)


def debezium_reverse(family: str, type_name: str) -> Reverse:
    """The value a consumer writes back for a Debezium value of a column of this type."""
    base, argument, _ = type_parts(type_name)
    if family == "postgresql" and base.endswith("[]"):
        element = debezium_reverse(family, base[:-2])
        return lambda v: None if v is None else pg_array_literal(v, element)
    reverse = _pg_reverse(base, argument) if family == "postgresql" else \
        _mysql_reverse(base, argument)
    return lambda v: None if v is None else reverse(v)


# java.sql.Types codes a Canal consumer interprets
_CANAL_INTS = {-7, -6, 5, 4, -5}
_CANAL_FLOATS = {6, 7, 8}
_CANAL_BINARY = {-2, -3, -4, 2004}


def canal_reverse(family: str, mysql_type: str, sql_type: int) -> Reverse:
    """The value a consumer writes back for a Canal string of a column of this type."""
    base, _, unsigned = type_parts(mysql_type)
    if family == "postgresql":
        table: dict[int, Reverse] = {16: lambda v: v == "true", 2014: _pg_tz_text}
    else:
        table = {93: _mysql_six, 92: _mysql_six}
        if base in ("point", "geometry", "linestring", "polygon"):
            table[sql_type] = unbase64_hex
    if sql_type in _CANAL_INTS and not (family == "postgresql" and base.startswith("bit")):
        table.setdefault(sql_type, int)
    if family == "mysql" and ((unsigned and base == "bigint") or base == "year"):
        table[sql_type] = int
    for code in _CANAL_FLOATS:
        table.setdefault(code, float)
    for code in _CANAL_BINARY:
        table.setdefault(code, unbase64_hex)
    reverse = table.get(sql_type, lambda v: v)
    return lambda v: None if v is None else reverse(v)


def _pg_tz_text(value: str) -> str:
    if "infinity" in value:
        return value
    return value[:-3] + "+00 BC" if value.endswith(" BC") else value + "+00"


def _mysql_six(value: str) -> str:
    """DATETIME/TIMESTAMP/TIME text with the column's digits -> six digits, none when zero."""
    whole, _, fraction = value.partition(".")
    return f"{whole}.{fraction.ljust(6, '0')}" if fraction.strip("0") else whole
