"""User-given keys, checked against the key columns' types before a request is accepted or
stored: a value a column cannot hold (out of the integer's range for its width and signedness,
too many digits for a DECIMAL, too long for a CHAR/VARCHAR/BINARY, a malformed date, time,
UUID or address, an ENUM label the column does not have) is refused when the request arrives,
naming the table, the column and the value, never when the dump runs.

MySQL compares loosely (``WHERE id = 'abc'`` is ``id = 0`` with a warning; a DECIMAL(5,2) key
given as ``1.505`` matches nothing), so the checks are made here, in Python, from the column
type the catalog declares, and each value is brought to the canonical form the chunk SELECT and
the binlog give for that column (see types.py and collation.py). No round trip to the server.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

from dblog.core.model import Key, TableInfo
from dblog.core.requestcheck import shown
from dblog.errors import DumpRequestError

from .collation import key_converter
from .nativetypes import NATIVE_TYPES, parse_canonical
from .types import (
    BINARY_TYPES,
    TEXT_TYPES,
    base_type,
    to_datetime,
    to_float32,
    to_time,
    type_labels,
)

INT_BITS = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "integer": 32,
            "bigint": 64}
_TIMESTAMP_MIN = datetime.datetime(1970, 1, 1, 0, 0, 1)
_TIMESTAMP_MAX = datetime.datetime(2038, 1, 19, 3, 14, 7, 999999)
_TIME_RE = re.compile(r"(-)?(\d{1,3}):([0-5]\d):([0-5]\d)(?:\.(\d{1,6}))?")
_HEX_RE = re.compile(r"(?:[0-9a-fA-F]{2})*")
_FLOAT_MAX = 3.4028234663852886e38
_MAX_DECIMAL_DIGITS = 65
KEY_FIX = ("give each key value as the column holds it: integers within the column's range, "
           "DECIMAL with at most its scale, dates as YYYY-MM-DD, date-times as YYYY-MM-DD "
           "HH:MM:SS[.ffffff] in UTC, binary values as hex")


class Refused(ValueError):
    """Why a value does not fit its column (made into a DumpRequestError naming both)."""


Parser = Callable[[str, Any], Any]
"""(the column's full type, a user's value) -> the canonical value; raises Refused."""


def _params(column_type: str) -> list[str]:
    """``decimal(10,2) unsigned`` -> ``["10", "2"]``; ``[]`` without parentheses."""
    inside = column_type.partition("(")[2].rpartition(")")[0]
    return [p.strip() for p in inside.split(",")] if inside else []


def _integer(value: Any) -> int:
    if isinstance(value, bool):
        raise Refused("a boolean is not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d{1,40}", value):
        return int(value)
    raise Refused("not an integer")


def parse_int(column_type: str, value: Any) -> int:
    tiny = base_type(column_type) == "tinyint"
    number = int(value) if tiny and isinstance(value, bool) else _integer(value)  # BOOLEAN
    name, unsigned = base_type(column_type), "unsigned" in column_type.lower()
    if name == "year":
        if number != 0 and not 1901 <= number <= 2155:
            raise Refused("out of range for YEAR (1901 to 2155, or 0)")
        return number
    if name == "bit":
        width = int((_params(column_type) or ["1"])[0])
        low, high = 0, 2**width - 1
    else:
        bits = INT_BITS[name]
        low, high = (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if not low <= number <= high:
        raise Refused(f"out of range ({low} to {high})")
    return number


def parse_decimal(column_type: str, value: Any) -> str:
    """The value with the column's scale, as the chunk SELECT gives it (``"1.50"``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise Refused("not a number")
    try:
        number = Decimal(str(value).strip() if isinstance(value, str) else repr(value))
    except InvalidOperation:
        raise Refused("not a number") from None
    params = _params(column_type) or ["10", "0"]
    precision, scale = int(params[0]), int(params[1]) if len(params) > 1 else 0
    if not number.is_finite():
        raise Refused("not a finite number")
    if number and number.adjusted() >= precision - scale:  # no arithmetic: 1e999999999
        raise Refused(f"more than {precision - scale} digits before the decimal point")
    with localcontext() as context:
        context.prec = 2 * _MAX_DECIMAL_DIGITS  # DECIMAL(65, 30) quantized exactly
        exact = number.quantize(Decimal(1).scaleb(-scale)) + 0  # + 0: no "-0.00"
        if exact != number:
            raise Refused(f"more than {scale} decimal places")
    if exact < 0 and "unsigned" in column_type.lower():
        raise Refused("negative, and the column is UNSIGNED")
    return format(exact, "f")


def parse_float(column_type: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise Refused("not a number")
    try:
        number = float(value)
    except (ValueError, OverflowError):
        raise Refused("not a number") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise Refused("not a finite number")
    if base_type(column_type) == "float":
        if abs(number) > _FLOAT_MAX:
            raise Refused("out of range for FLOAT")
        return float(to_float32(number))
    return number


def parse_text(column_type: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise Refused("not a string")
    text = value if isinstance(value, str) else str(value)
    params = _params(column_type)
    if base_type(column_type) in ("char", "varchar") and params and len(text) > int(params[0]):
        raise Refused(f"longer than the column's {params[0]} characters")
    return text


def parse_binary(column_type: str, value: Any) -> str:
    """Lowercase hex, as the chunk SELECT gives it (BINARY(n) zero-padded to n bytes)."""
    if not isinstance(value, str) or not _HEX_RE.fullmatch(value):
        raise Refused("not a hex string (binary keys are given as hex, two digits a byte)")
    raw = bytes.fromhex(value)
    params = _params(column_type)
    if base_type(column_type) in ("binary", "varbinary") and params:
        if len(raw) > int(params[0]):
            raise Refused(f"longer than the column's {params[0]} bytes")
        if base_type(column_type) == "binary":
            raw = raw.ljust(int(params[0]), b"\0")
    return raw.hex()


def parse_enum(column_type: str, value: Any) -> str:
    labels = type_labels(column_type)
    if not isinstance(value, str):
        raise Refused("not a string (give the label)")
    folded = {label.casefold(): label for label in labels}
    if value not in labels and value.casefold() not in folded:
        raise Refused(f"not one of the column's labels {labels}")
    return value if value in labels else folded[value.casefold()]


def parse_set(column_type: str, value: Any) -> str:
    labels = type_labels(column_type)
    if not isinstance(value, str):
        raise Refused("not a string (give the labels joined by commas)")
    folded = {label.casefold(): i for i, label in enumerate(labels)}
    items = [item for item in value.split(",") if item]
    unknown = [item for item in items if item.casefold() not in folded]
    if unknown:
        raise Refused(f"{unknown} are not labels of the column ({labels})")
    order = sorted({folded[item.casefold()] for item in items})
    return ",".join(labels[i] for i in order)


def parse_date(column_type: str, value: Any) -> str:
    if not isinstance(value, str):
        raise Refused("not a date string (YYYY-MM-DD)")
    try:
        day = datetime.date.fromisoformat(value.strip())
    except ValueError:
        raise Refused("not a valid date (YYYY-MM-DD)") from None
    return f"{day.year:04d}-{day.month:02d}-{day.day:02d}"


def parse_datetime(column_type: str, value: Any) -> str:
    """``YYYY-MM-DD HH:MM:SS[.ffffff]`` in UTC (TIMESTAMP keys are read in UTC)."""
    if not isinstance(value, str):
        raise Refused("not a date-time string (YYYY-MM-DD HH:MM:SS[.ffffff])")
    try:
        moment = datetime.datetime.fromisoformat(value.strip())
    except ValueError:
        raise Refused("not a valid date-time (YYYY-MM-DD HH:MM:SS[.ffffff])") from None
    if moment.tzinfo is not None:
        raise Refused("has a time zone offset: give it in UTC without one")
    _check_fraction(column_type, moment.microsecond)
    if base_type(column_type) == "timestamp" and \
            not _TIMESTAMP_MIN <= moment <= _TIMESTAMP_MAX:
        raise Refused("out of the TIMESTAMP range (1970-01-01 00:00:01 to "
                      "2038-01-19 03:14:07 UTC)")
    return str(to_datetime(moment))


def _check_fraction(column_type: str, microseconds: int) -> None:
    """A fraction finer than the column's precision would never match a row."""
    digits = int((_params(column_type) or ["0"])[0])
    if microseconds % 10 ** (6 - digits):
        raise Refused(f"has more fractional-second digits than the column's {digits}")


def parse_time(column_type: str, value: Any) -> str:
    match = _TIME_RE.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise Refused("not a time ([-]HH:MM:SS[.ffffff])")
    sign, hours, minutes, seconds, fraction = match.groups()
    micros = int((fraction or "0").ljust(6, "0"))
    _check_fraction(column_type, micros)
    span = datetime.timedelta(hours=int(hours), minutes=int(minutes), seconds=int(seconds),
                              microseconds=micros)
    if span > datetime.timedelta(hours=838, minutes=59, seconds=59):
        raise Refused("out of the TIME range (-838:59:59 to 838:59:59)")
    return str(to_time(-span if sign else span))


def parse_native(column_type: str, value: Any) -> str:
    if not isinstance(value, str):
        raise Refused(f"not a {base_type(column_type).upper()} string")
    try:
        return parse_canonical(base_type(column_type), value.strip())
    except ValueError as exc:
        raise Refused(f"not a valid {base_type(column_type).upper()}: {exc}") from None


def parser_for(column_type: str) -> Parser:
    """The check and canonical form of a key value of ``column_type``."""
    name = base_type(column_type)
    parsers: dict[str, Parser] = {
        "year": parse_int, "bit": parse_int, "decimal": parse_decimal, "numeric": parse_decimal,
        "float": parse_float, "double": parse_float, "real": parse_float, "enum": parse_enum,
        "set": parse_set, "date": parse_date, "datetime": parse_datetime,
        "timestamp": parse_datetime, "time": parse_time,
    }
    if name in parsers:
        return parsers[name]
    if name in INT_BITS:
        return parse_int
    if name in BINARY_TYPES:
        return parse_binary
    if name in NATIVE_TYPES:
        return parse_native
    if name in TEXT_TYPES:
        return parse_text
    raise Refused(f"keys of type {column_type} cannot be given in a request")


def _column_parser(info: TableInfo, name: str) -> Callable[[Any], Any]:
    column_type = {c.name: c.type_name for c in info.columns}[name]
    norm = key_converter(info.extra.get("collations", {}).get(name))

    def parse(value: Any) -> Any:
        try:
            if value is None:
                raise Refused("null (key columns are never null)")
            canonical = parser_for(column_type)(column_type, value)
        except Refused as exc:
            raise DumpRequestError(f"a key value for column {name} ({column_type}) of "
                                   f"{info.table} is refused: {exc}; got {shown(value)}",
                                   fix=KEY_FIX) from None
        return canonical if norm is None else norm(canonical)

    return parse


def parse_keys(info: TableInfo, keys: Sequence[Sequence[object]]) -> list[Key]:
    """``keys`` (each of the key's arity) in canonical form; DumpRequestError naming the
    table, the column and the first value the column cannot hold."""
    for key in keys:
        if isinstance(key, (str, bytes)) or not isinstance(key, Sequence) \
                or len(key) != len(info.key_columns):
            raise DumpRequestError(f"a key of {info.table} has {len(info.key_columns)} "
                                   f"value(s) ({', '.join(info.key_columns)}), got {shown(key)}")
    columns = [_column_parser(info, name) for name in info.key_columns]
    return [tuple(parse(value) for parse, value in zip(columns, key, strict=True))
            for key in keys]
