"""Canonical values to Canal's flat-message values, and the ``sqlType`` of each column.

Canal writes every value as a string (``Map<String, String>``) and names each column's
``java.sql.Types`` code in ``sqlType`` and its MySQL type in ``mysqlType``. Strings follow
what Canal prints for MySQL (temporal values in ``yyyy-MM-dd HH:mm:ss`` with the column's
fractional digits); binary values are base64, which Flink's ``canal-json`` decodes into BYTES
(Canal itself prints them as ISO-8859-1 text; see docs/formats.md).
"""

from __future__ import annotations

import base64
from typing import Any

from dblog.formats.coltypes import (
    MY_BINARY,
    MY_SPATIAL,
    MY_TEXT,
    PG_FLOATS,
    ColumnType,
)
from dblog.formats.rows import Converter

# java.sql.Types
BIT, TINYINT, SMALLINT, INTEGER, BIGINT = -7, -6, 5, 4, -5
REAL, DOUBLE, NUMERIC, DECIMAL = 7, 8, 2, 3
CHAR, VARCHAR, LONGVARCHAR, BINARY, VARBINARY = 1, 12, -1, -2, -3
DATE, TIME, TIMESTAMP, TIME_WITH_TIMEZONE, TIMESTAMP_WITH_TIMEZONE = 91, 92, 93, 2013, 2014
BOOLEAN, BLOB, CLOB, ARRAY, OTHER = 16, 2004, 2005, 2003, 1111

_MY_SQL_TYPES = {
    "tinyint": TINYINT, "smallint": SMALLINT, "mediumint": INTEGER, "int": INTEGER,
    "integer": INTEGER, "bigint": BIGINT, "decimal": DECIMAL, "numeric": DECIMAL,
    "float": REAL, "double": DOUBLE, "real": DOUBLE, "bit": BIT, "date": DATE,
    "datetime": TIMESTAMP, "timestamp": TIMESTAMP, "time": TIME, "year": VARCHAR,
    "char": CHAR, "varchar": VARCHAR, "binary": BINARY, "varbinary": VARBINARY,
    "enum": CHAR, "set": CHAR, "json": LONGVARCHAR,
}
# an unsigned integer needs the next wider type (Canal and JDBC widen them the same way)
_MY_UNSIGNED = {"tinyint": SMALLINT, "smallint": INTEGER, "mediumint": INTEGER,
                "int": BIGINT, "integer": BIGINT, "bigint": DECIMAL}
_PG_SQL_TYPES = {
    "smallint": SMALLINT, "integer": INTEGER, "bigint": BIGINT, "oid": BIGINT,
    "boolean": BOOLEAN, "real": REAL, "double precision": DOUBLE, "numeric": NUMERIC,
    "money": DECIMAL, "text": VARCHAR, "character varying": VARCHAR, "character": CHAR,
    "bytea": BINARY, "date": DATE, "time without time zone": TIME,
    "time with time zone": TIME_WITH_TIMEZONE, "timestamp without time zone": TIMESTAMP,
    "timestamp with time zone": TIMESTAMP_WITH_TIMEZONE, "bit": BIT, "bit varying": BIT,
    "array": ARRAY, "json": OTHER, "jsonb": OTHER, "uuid": OTHER, "interval": OTHER,
}


def sql_type(ct: ColumnType) -> int:
    if ct.family == "postgresql":
        return _PG_SQL_TYPES.get(ct.base, VARCHAR if ct.base.startswith("char") else OTHER)
    if ct.unsigned and ct.base in _MY_UNSIGNED:
        return _MY_UNSIGNED[ct.base]
    if ct.base in MY_TEXT:
        return _MY_SQL_TYPES.get(ct.base, CLOB)
    if ct.base in MY_BINARY or ct.base in MY_SPATIAL:
        return _MY_SQL_TYPES.get(ct.base, BLOB)
    return _MY_SQL_TYPES.get(ct.base, VARCHAR)


def _text(value: Any) -> str:
    return value if type(value) is str else str(value)


def _float(value: Any) -> str:
    return repr(float(value))


def _bool(value: Any) -> str:
    return "true" if value else "false"


def _base64(value: Any) -> str:
    return base64.b64encode(bytes.fromhex(value)).decode("ascii")


def _fraction(precision: int) -> Converter:
    """``2024-06-30 12:00:00.123000`` (the canonical form's six digits, or none) with the
    column's fractional digits, as MySQL and Canal print it (``.123`` for DATETIME(3))."""
    def convert(value: Any) -> str:
        whole, _, fraction = value.partition(".")
        digits = fraction.ljust(6, "0")[:precision]
        return f"{whole}.{digits}" if precision else whole

    return convert


def _utc_wall_time(value: Any) -> str:
    """timestamptz (``2024-01-02 01:04:05.5+00``, always UTC here) without its offset, the
    form of MySQL's TIMESTAMP in Canal; ``infinity``/BC kept."""
    return str(value).replace("+00", "", 1)


def canal_converter(ct: ColumnType) -> Converter:
    return _postgres(ct) if ct.family == "postgresql" else _mysql(ct)


def _postgres(ct: ColumnType) -> Converter:
    base = ct.base
    if base in ("boolean", "bool"):
        return _bool
    if base in PG_FLOATS:
        return _float
    if base == "bytea":
        return _base64
    if base in ("timestamp with time zone", "timestamptz"):
        return _utc_wall_time
    return _text  # integers, numeric, text, dates, times, json, uuid, arrays (the literal)...


def _mysql(ct: ColumnType) -> Converter:
    base = ct.base
    if base in ("float", "double", "real"):
        return _float
    if base in ("datetime", "timestamp", "time"):
        return _fraction(ct.precision or 0)
    if base in MY_BINARY or base in MY_SPATIAL:
        return _base64
    return _text  # integers (any sign), year, bit, decimal, date, text, enum, set, json, ...
