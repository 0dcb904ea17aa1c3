"""Canonical values for MySQL/MariaDB columns, identical for chunk rows and binlog events.

The chunk SELECT (mysqlclient or PyMySQL, text protocol, session ``time_zone='+00:00'``) and the
binlog decoder (mysql-replication) hand over Python values of different shapes; one converter
per column kind turns either into the canonical value:

===========================================  =============================================
MySQL / MariaDB type                         canonical JSON value
===========================================  =============================================
TINYINT..BIGINT (signed or UNSIGNED), YEAR   integer (full unsigned range)
DECIMAL                                      string with the column's scale (``"1.50"``)
FLOAT                                        number, the shortest decimal that reads back as
                                             the same 32-bit float (``0.1``)
DOUBLE                                       number
DATE                                         ``"YYYY-MM-DD"``; zero dates become null
DATETIME, TIMESTAMP                          ``"YYYY-MM-DD HH:MM:SS[.ffffff]"`` (TIMESTAMP in
                                             UTC; the fraction only when non-zero)
TIME                                         ``"[-]HH:MM:SS[.ffffff]"`` (hours may exceed 24)
CHAR, VARCHAR, TEXT (any charset)            string (CHAR without trailing pad spaces)
BINARY, VARBINARY, BLOB                      lowercase hex string (BINARY(n) keeps its zero
                                             padding)
ENUM                                         string (the label)
SET                                          string, labels joined by commas in definition
                                             order
JSON                                         string: the document text (MariaDB stores it
                                             verbatim, duplicate keys and all); MySQL 8 see
                                             ``flavor.py``
BIT(n)                                       integer
UUID as CHAR(36) / BINARY(16)                string / 32 hex digits (as the column type says)
MariaDB UUID, INET4, INET6                   string, the server's text form (nativetypes.py)
GEOMETRY, POINT, ... (spatial)               lowercase hex: 4-byte SRID, then the WKB
===========================================  =============================================

Dates with a zero part (``2024-00-15``, ``0000-00-00``) and the zero TIMESTAMP have no ISO form
and are null on both paths. Any other column type is refused at start and by ``dblog check``
(:func:`unsupported`), never emitted in two forms.
"""

from __future__ import annotations

import datetime
import re
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from dblog.errors import TableChanged

from .collation import normaliser
from .nativetypes import NATIVE_TYPES, SPATIAL_TYPES

Converter = Callable[[Any], Any]

INT_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"})
TEXT_TYPES = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext"})
BINARY_TYPES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
TEMPORAL_TYPES = frozenset({"date", "datetime", "timestamp", "time"})
SUPPORTED_TYPES = (INT_TYPES | TEXT_TYPES | BINARY_TYPES | TEMPORAL_TYPES | NATIVE_TYPES
                   | SPATIAL_TYPES | {"decimal", "numeric", "float", "double", "real", "bit",
                                      "json", "enum", "set"})
_EPOCH = datetime.datetime(1970, 1, 1)
_F32 = struct.Struct("<f")
_LABEL_RE = re.compile(r"'((?:[^']|'')*)'")


def identity(value: Any) -> Any:
    return value


def to_decimal(value: Any) -> Any:
    if value is None:
        return None
    return format(value if isinstance(value, Decimal) else Decimal(str(value)), "f")


def to_float32(value: Any) -> Any:
    """The shortest decimal that packs to the same 32-bit float."""
    if value is None:
        return None
    packed = _F32.pack(float(value))
    exact = _F32.unpack(packed)[0]
    for digits in range(6, 10):
        short = float(f"{exact:.{digits}g}")
        if _F32.pack(short) == packed:
            return short
    return exact


def to_float(value: Any) -> Any:
    return None if value is None else float(value)


def to_date(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return _zero_to_none(value)
    return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"


def to_datetime(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return _zero_to_none(value)
    text = (f"{value.year:04d}-{value.month:02d}-{value.day:02d} "
            f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}")
    return f"{text}.{value.microsecond:06d}" if value.microsecond else text


def to_timestamp(value: Any) -> Any:
    """TIMESTAMP: second 0 of the epoch is the zero TIMESTAMP (the range starts at second 1)."""
    if isinstance(value, datetime.datetime) and value == _EPOCH:
        return None
    return to_datetime(value)


def _zero_to_none(value: str | None) -> str | None:
    return None if value is None or value.startswith("0000-00-00") else value


def to_time(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, datetime.time):
        value = datetime.timedelta(hours=value.hour, minutes=value.minute,
                                   seconds=value.second, microseconds=value.microsecond)
    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    sign = "-" if micros < 0 else ""
    seconds, fraction = divmod(abs(micros), 1_000_000)
    hours, rest = divmod(seconds, 3600)
    text = f"{sign}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{text}.{fraction:06d}" if fraction else text


def to_hex(value: Any) -> Any:
    if value is None:
        return None
    return (value.encode("latin-1") if isinstance(value, str) else bytes(value)).hex()


def padded_hex(length: int) -> Converter:
    """BINARY(n): the binlog drops trailing zero bytes, the SELECT keeps them."""
    def convert(value: Any) -> Any:
        if value is None:
            return None
        raw = value.encode("latin-1") if isinstance(value, str) else bytes(value)
        return raw.ljust(length, b"\0").hex()

    return convert


def to_bit(value: Any) -> Any:
    if value is None or isinstance(value, int):
        return value
    if isinstance(value, str):  # mysql-replication: "0101"
        return int(value, 2) if value else 0
    return int.from_bytes(value, "big")


def to_text(value: Any) -> Any:
    if value is None or type(value) is str:
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8")
    return str(value)


def set_converter(labels: tuple[str, ...] | None) -> Converter:
    """SET values: the binlog gives a Python set, the SELECT a comma-joined string."""
    order = {label: i for i, label in enumerate(labels or ())}

    def convert(value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        return ",".join(sorted(value, key=lambda label: order.get(label, len(order))))

    return convert


def unsupported(column_type: str) -> bool:
    """Whether a column type has no canonical form that both paths give identically."""
    return base_type(column_type) not in SUPPORTED_TYPES


def base_type(column_type: str) -> str:
    """``int(10) unsigned`` -> ``int``; ``enum('a','b')`` -> ``enum``."""
    return column_type.split("(", 1)[0].split(" ", 1)[0].strip().lower()


def dump_converter(column_type: str) -> Converter:
    """The converter for a value the chunk SELECT returned (see :func:`select_expression`)."""
    name = base_type(column_type)
    if name in INT_TYPES:
        return identity
    converters: dict[str, Converter] = {
        "decimal": to_decimal, "numeric": to_decimal, "float": to_float32, "double": to_float,
        "real": to_float, "date": to_date, "datetime": to_datetime, "timestamp": to_datetime,
        "time": to_time, "bit": to_bit, "json": to_text, "enum": to_text, "set": to_text,
    }
    if name in converters:
        return converters[name]
    if name in BINARY_TYPES or name in SPATIAL_TYPES:
        return to_hex
    return to_text


def select_expression(column_type: str) -> str:
    """SQL for a column (``{col}`` is the quoted name) whose value converts exactly: FLOAT is
    widened to DOUBLE (its text form has only 6 digits)."""
    if base_type(column_type) == "float":
        return "CAST({col} AS DOUBLE)"
    return "{col}"


def key_param(column_type: str, value: Any) -> Any:
    """A canonical key value as a query parameter (ENUM and SET: see :func:`key_binder`)."""
    if value is None:
        return None
    name = base_type(column_type)
    if name in BINARY_TYPES or name in SPATIAL_TYPES:
        return bytes.fromhex(value)
    return value


def key_placeholder(column_type: str) -> str:
    """A key bound's placeholder: a FLOAT column is compared widened to DOUBLE, so its bound
    is made the same 32-bit float first (0.1 as a DOUBLE is below the FLOAT 0.1)."""
    return "CAST(%s AS FLOAT)" if base_type(column_type) == "float" else "%s"


def type_labels(column_type: str) -> list[str]:
    """``enum('a','it''s')`` -> ``['a', "it's"]``."""
    inside = column_type.partition("(")[2].rpartition(")")[0]
    return [m.replace("''", "'") for m in _LABEL_RE.findall(inside)]


def key_binder(column_type: str, collation: str | None) -> Converter:
    """Canonical key value -> query parameter. ENUM and SET keys are bound as their number
    (the label's index, the SET's bits): ``ORDER BY`` sorts them by it, while a label bound as
    text would be compared as text. A label the column does not have (the ENUM changed while
    dumping) raises TableChanged, and the chunk is planned again."""
    name = base_type(column_type)
    if name not in ("enum", "set"):
        return lambda value: key_param(column_type, value)
    norm = normaliser(collation) or identity
    index = {norm(label): i for i, label in enumerate(type_labels(column_type))}

    def number(label: str) -> int:
        try:
            return index[norm(label)]
        except KeyError:
            raise TableChanged(f"the key value {label!r} is not a label of the column "
                               f"({column_type}) any more") from None

    if name == "enum":
        # '' is index 0 (an invalid value stored under a lax sql_mode) unless it is a label
        real_empty = norm("") in index
        return lambda value: None if value is None else (
            number(value) + 1 if value or real_empty else 0)
    return lambda value: None if value is None else sum(
        1 << number(item) for item in value.split(",") if item)


# '%%': these expressions go into statements with parameters (the driver's paramstyle)
_ZERO_PART = "YEAR({col}) = 0 OR MONTH({col}) = 0 OR DAYOFMONTH({col}) = 0"
_DATE_TIME = (f"IF({_ZERO_PART}, NULL, IF(MICROSECOND({{col}}) = 0, "
              "DATE_FORMAT({col}, '%%Y-%%m-%%d %%H:%%i:%%s'), "
              "DATE_FORMAT({col}, '%%Y-%%m-%%d %%H:%%i:%%s.%%f')))")
_JSON_EXPRESSIONS = {
    **{name: "{col}" for name in INT_TYPES - {"year"}},
    **{name: "{col}" for name in TEXT_TYPES}, "enum": "{col}", "set": "{col}",
    # MariaDB's JSON is a LONGTEXT that JSON_OBJECT would embed as a document (and rewrite)
    "longtext": "CAST({col} AS CHAR)",
    **{name: "{col}" for name in NATIVE_TYPES},
    "decimal": "CAST({col} AS CHAR)", "numeric": "CAST({col} AS CHAR)",
    "date": f"IF({_ZERO_PART}, NULL, DATE_FORMAT({{col}}, '%%Y-%%m-%%d'))",
    "datetime": _DATE_TIME, "timestamp": _DATE_TIME,
}


def json_expression(column_type: str, collation: str | None) -> str | None:
    """SQL giving the column's canonical value inside the server's ``JSON_OBJECT`` (the dump
    fast path), or None for types whose JSON form could differ from the canonical value
    (floating point, binary strings, BIT, TIME, YEAR, JSON)."""
    name = base_type(column_type)
    if name in TEXT_TYPES:
        if collation is None or collation == "binary":
            return None
        if not collation.startswith("utf8mb4_"):
            # JSON_OBJECT refuses a mix of charsets ("Illegal mix of collations")
            return "CONVERT({col} USING utf8mb4)"
    return _JSON_EXPRESSIONS.get(name)
