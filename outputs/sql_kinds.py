"""The type mapping of replica columns: a source column type (``ColumnInfo.type_name``) becomes a
*kind*, and each kind a target type per dialect (SQL) or an Arrow type (Delta).

Why kinds: the events carry canonical values (docs/formats.md, docs/sources/mysql.md), the same
for a log event and a dump row of one column. A replica stores them so that reading a row back
gives the canonical value again (``from_db``), which is what "the replica equals the source"
is checked against:

=========  =====================================  ==========================  ==============
kind       source types                           canonical value             SQL target
=========  =====================================  ==========================  ==============
INT        smallint..bigint, oid, year, MySQL     int                         BIGINT
           bit(<64)
BIGUINT    bigint unsigned, MySQL bit(64)         int up to 2**64-1           NUMERIC(20,0)
BOOL       boolean                                bool                        BOOLEAN
FLOAT      real, double, float                    float                       DOUBLE
DECIMAL    numeric(p,s), decimal(p,s)             exact text ``"9.90"``       NUMERIC(p,s)
TEXT       everything else (text, varchar,        text                        TEXT / VARCHAR
           uuid, temporal, json, binary as hex,
           PostgreSQL bit(n) and bit varying)
JSON       unknown (``any``) or untyped columns   any JSON value              TEXT (JSON)
=========  =====================================  ==========================  ==============

Delta (Arrow types): INT int64, BIGUINT decimal(20,0), BOOL bool, FLOAT float64, DECIMAL
decimal(p,s) up to 38 digits (string beyond, or without a precision), TEXT and JSON string.
SQLite stores DECIMAL and BIGUINT as TEXT (its NUMERIC affinity would round them); MySQL and
MariaDB store an unconstrained ``numeric`` as TEXT (their DECIMAL has a fixed scale) and text
keys as ``VARCHAR(n)`` under a binary **NO PAD** collation (:func:`mysql_key_collation`): a
key needs a length, a case-insensitive collation would merge keys that differ in case, and a
PAD SPACE one (``utf8mb4_bin``) keys that differ in trailing spaces, which a PostgreSQL
source (or a NO PAD MySQL column) keeps apart.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum
from typing import Any

import orjson
from sqlalchemy import BigInteger, Boolean, Double, Numeric, String, Text
from sqlalchemy.types import TypeEngine

from dblog.core.model import Row, TableId, TableInfo
from dblog.errors import FatalOutputError

GUARD_MAJOR, GUARD_MINOR, DELETED = "_dblog_major", "_dblog_minor", "_dblog_deleted"
GUARD_COLUMNS = (GUARD_MAJOR, GUARD_MINOR, DELETED)
MYSQL_KEY_LENGTH = 255
"""The length of a MySQL/MariaDB text key column whose source type has none (``text``)."""
MYSQL_KEY_MAX = 768
"""The longest utf8mb4 VARCHAR an InnoDB key holds (3,072 bytes, 4 per character)."""
NOPAD_BINARY = frozenset({"utf8mb4_nopad_bin", "utf8mb4_0900_bin", "binary"})
"""MySQL/MariaDB collations under which keys are equal only when their bytes are."""


class Kind(str, Enum):
    INT = "int"
    BIGUINT = "biguint"
    BOOL = "bool"
    FLOAT = "float"
    DECIMAL = "decimal"
    TEXT = "text"
    JSON = "json"


@dataclass(frozen=True, slots=True)
class ColumnKind:
    kind: Kind
    precision: int | None = None
    scale: int | None = None
    length: int | None = None
    """Of a char/varchar/uuid source column (sizes a MySQL key column)."""


_INTS = re.compile(r"^(tiny|small|medium|big)?int(eger)?\b|^int[248]\b|^oid\b|^year\b|"
                   r"^serial|^bigserial|^smallserial")
_FLOATS = re.compile(r"^(real|double|float)")
_DECIMALS = re.compile(r"^(numeric|decimal)\s*(\(\s*(\d+)\s*(,\s*(\d+)\s*)?\))?")
_CHARS = re.compile(r"^(character varying|varchar|character|char|nvarchar|nchar)\s*\((\d+)\)")
_BIT = re.compile(r"^bit\s*\((\d+)\)")
_BINARY = re.compile(r"^(binary|varbinary)\s*\((\d+)\)")


def kind_of(type_name: str, flavour: str | None = None) -> ColumnKind:
    """The kind of a source column type as the connectors name it (PostgreSQL's
    ``format_type``, MySQL's ``COLUMN_TYPE``). ``flavour``: the source's
    (``TableInfo.extra["flavour"]``), where one type name means two things: ``bit(n)`` is
    an integer in MySQL's events but a bit string (``"0101"``) in PostgreSQL's, whose
    leading zeros an integer would lose; None: MySQL's meaning."""
    name = type_name.strip().lower()
    if name.endswith("[]") or name == "":
        return ColumnKind(Kind.TEXT)
    if name == "any":
        return ColumnKind(Kind.JSON)
    if name.startswith("bigint") and "unsigned" in name:
        return ColumnKind(Kind.BIGUINT)
    if (bit := _BIT.match(name)) and flavour != "postgresql":
        return ColumnKind(Kind.BIGUINT if int(bit.group(1)) >= 64 else Kind.INT)
    if name in ("boolean", "bool"):
        return ColumnKind(Kind.BOOL)
    if _INTS.match(name):
        return ColumnKind(Kind.INT)
    if _FLOATS.match(name):
        return ColumnKind(Kind.FLOAT)
    if dec := _DECIMALS.match(name):
        precision, scale = dec.group(3), dec.group(5)
        return ColumnKind(Kind.DECIMAL, int(precision) if precision else None,
                          int(scale or 0) if precision else None)
    if chars := _CHARS.match(name):
        return ColumnKind(Kind.TEXT, length=int(chars.group(2)))
    if name == "uuid":
        return ColumnKind(Kind.TEXT, length=36)
    if binary := _BINARY.match(name):  # canonical values are hex: two characters a byte
        return ColumnKind(Kind.TEXT, length=2 * int(binary.group(2)))
    return ColumnKind(Kind.TEXT)


def kind_of_value(value: Any) -> ColumnKind:
    """A column the metadata does not know (added since it was read): its first value's kind."""
    if isinstance(value, bool):
        return ColumnKind(Kind.BOOL)
    if isinstance(value, int):
        return ColumnKind(Kind.INT)
    if isinstance(value, float):
        return ColumnKind(Kind.FLOAT)
    if isinstance(value, str):
        return ColumnKind(Kind.TEXT)
    return ColumnKind(Kind.JSON)


def kinds_of(info: TableInfo) -> dict[str, ColumnKind]:
    """The kind of each of the source table's columns, by its metadata."""
    flavour = info.extra.get("flavour")
    return {c.name: kind_of(c.type_name, flavour) for c in info.columns}


def require_info(lookup: Callable[[TableId], TableInfo | None], table: TableId, where: str,
                 output: str) -> TableInfo:
    """The source's metadata of ``table`` from ``lookup``, or a :class:`FatalOutputError`
    (``where`` names the output) telling how to give ``output`` (its class) the metadata."""
    info = lookup(table)
    if info is None:
        raise FatalOutputError(f"{where}: no metadata for source table {table}",
                               fix="give the output the source's table metadata "
                                   f"({output}(..., tables=lookup) or set_tables)")
    return info


def add_row_kinds(kinds: dict[str, ColumnKind], rows: Iterable[Row | None],
                  source: Callable[[], TableInfo | None]) -> bool:
    """Add to ``kinds`` the columns of ``rows`` it lacks (a MERGE that adds them to a Delta
    table): the kind of the type the source's metadata names, else of the first non-null
    value (:func:`kind_of_value`). A column the metadata does not name and whose values are
    all None is not added: None has no type, and its rows need no column yet (the column
    added later reads null in them). ``source`` is called only for a row with such a
    column, until it gives the metadata. True when a column was added."""
    info, added = None, False
    for row in rows:
        if row is None or kinds.keys() >= row.keys():
            continue
        if info is None:
            info = source()
        known = {} if info is None else kinds_of(info)
        for column, value in row.items():
            if column in kinds or (value is None and column not in known):
                continue
            kinds[column] = known[column] if column in known else kind_of_value(value)
            added = True
    return added


def _stored_as_text(kind: ColumnKind, dialect: str) -> bool:
    if kind.kind in (Kind.TEXT, Kind.JSON):
        return True
    if dialect == "delta":  # Arrow decimals hold at most 38 digits
        return kind.kind is Kind.DECIMAL and (kind.precision is None or kind.precision > 38)
    if kind.kind in (Kind.DECIMAL, Kind.BIGUINT):
        return dialect == "sqlite" or (kind.kind is Kind.DECIMAL and kind.precision is None
                                       and dialect in ("mysql", "mariadb"))
    return False


def stored_as_text(kind: ColumnKind, dialect: str) -> bool:
    """Whether the target keeps ``kind`` as text (``dialect``: a SQLAlchemy dialect name, or
    ``"delta"``)."""
    return _stored_as_text(kind, dialect)


def exact_key(kind: ColumnKind) -> bool:
    """Whether a key column of ``kind`` is stored as its canonical text on every target: a
    DECIMAL without a declared scale (PostgreSQL's unconstrained ``numeric``).

    Its events carry the value as PostgreSQL prints it, scale included, and the apply core
    compares keys as those values: ``"1.5"`` and ``"1.50"`` are two keys to it (sound: a
    row's key changes spelling only by an update of the key, which PostgreSQL logs with the
    old key, as it compares the key's stored bytes; see :mod:`dblog.replica.reduce`). A
    NUMERIC key column would compare them as numbers, one key: the tombstone of ``"1.5"``
    and the upsert of ``"1.50"`` of that update (one guard) would meet in one row. A
    declared scale gives each value one spelling: such keys stay NUMERIC / DECIMAL."""
    return kind.kind is Kind.DECIMAL and kind.scale is None


def mysql_key_collation(is_mariadb: bool, version: tuple[int | str, ...]) -> str:
    """The collation of a MySQL/MariaDB replica's text key columns: binary and NO PAD, so
    keys are equal only when the source's are (``'a'``, ``'A'`` and ``'a '`` stay three
    keys): ``utf8mb4_nopad_bin`` on MariaDB (10.2+), ``utf8mb4_0900_bin`` on MySQL 8.0.17+.
    Older MySQL has none: ``utf8mb4_bin`` (PAD SPACE), whose keys ending in a space the
    output refuses (``sql_keys.KeyText.padded``)."""
    if is_mariadb:
        return "utf8mb4_nopad_bin"
    numbers = tuple(v for v in version if isinstance(v, int))
    return "utf8mb4_0900_bin" if numbers >= (8, 0, 17) else "utf8mb4_bin"


def mysql_key_length(kind: ColumnKind) -> int:
    """The VARCHAR length of a MySQL/MariaDB text key column of ``kind``: the source's, else
    :data:`MYSQL_KEY_LENGTH`, at most :data:`MYSQL_KEY_MAX` (longer keys are refused when
    written, naming the fix)."""
    return min(kind.length or MYSQL_KEY_LENGTH, MYSQL_KEY_MAX)


def sa_type(kind: ColumnKind, dialect: str, key: bool,
            key_collation: str = "utf8mb4_nopad_bin") -> TypeEngine[Any]:
    """The target column type of ``kind`` (``key``: part of the primary key;
    ``key_collation``: a MySQL/MariaDB text key's, :func:`mysql_key_collation`)."""
    if _stored_as_text(kind, dialect) or (key and exact_key(kind)):
        if dialect in ("mysql", "mariadb"):
            if key:
                return String(mysql_key_length(kind), collation=key_collation)
            return Text(2**32 - 1, collation="utf8mb4_bin")  # LONGTEXT
        return Text()
    if kind.kind is Kind.INT:
        return BigInteger()
    if kind.kind is Kind.BIGUINT:
        return Numeric(20, 0, asdecimal=True)
    if kind.kind is Kind.BOOL:
        return Boolean()
    if kind.kind is Kind.FLOAT:
        return Double()
    return Numeric(kind.precision, kind.scale, asdecimal=True)


def needs_conversion(kind: ColumnKind, dialect: str) -> bool:
    """Whether a SQL target needs ``kind``'s canonical values converted (:func:`to_db`):
    only JSON values (to text) and, on SQLite, integers beyond 64 bits (to text). Decimal
    text is what PostgreSQL's COPY and MySQL's literals parse, exactly."""
    return kind.kind is Kind.JSON or (kind.kind is Kind.BIGUINT and dialect == "sqlite")


def to_db(kind: ColumnKind, dialect: str, value: Any) -> Any:
    """A canonical value as the target column takes it."""
    if value is None:
        return None
    if kind.kind is Kind.JSON:
        return orjson.dumps(value).decode()
    if kind.kind in (Kind.DECIMAL, Kind.BIGUINT):
        return str(value) if _stored_as_text(kind, dialect) else Decimal(str(value))
    return value


def from_db(kind: ColumnKind, value: Any) -> Any:
    """A stored value back in canonical form (what the source's events carry)."""
    if value is None:
        return None
    if kind.kind is Kind.JSON:
        return orjson.loads(value)
    if kind.kind is Kind.BIGUINT:
        return int(value)
    if kind.kind is Kind.DECIMAL:
        return format(value, "f") if isinstance(value, Decimal) else str(value)
    if kind.kind is Kind.BOOL:
        return bool(value)
    if kind.kind is Kind.INT:
        return int(value)
    if kind.kind is Kind.FLOAT:
        return float(value)
    return value
