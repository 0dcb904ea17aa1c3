"""The shape of a dump request, checked before anything looks at the source.

A request arrives from many places (the embedded API, the HTTP API, the ZooKeeper request
queue a standby or the CLI writes to) as whatever a caller passed: any value must give a
:class:`~dblog.errors.DumpRequestError` naming the problem, never a foreign exception inside
the engine. What only the source can tell (the table exists and is captured, the key's arity
and each value's type and range) is checked next, by :func:`dblog.core.dumps.validated_dump`.

The bounds keep one request from growing the state past what a store holds (a ZooKeeper node
holds 1 MB by default): a key dump stores its keys in the state until it is forgotten.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dblog.core.model import TableId
from dblog.errors import DumpRequestError

MAX_TABLES = 10_000
MAX_KEYS = 100_000
MAX_KEY_BYTES = 256 * 1024
"""The keys of one request as JSON, at most (they are stored in the state)."""
MAX_KEY_COLUMNS = 32
MAX_NAME_CHARS = 512
MAX_VALUE_CHARS = 4096
MAX_INT_BITS = 128

Scalar = str | int | float | bool
KEYS_FIX = "give keys as a list of keys, each a list of values in key-column order: [[1], [2]]"


@dataclass(frozen=True, slots=True)
class CheckedRequest:
    """A request whose shape is right: ``tables`` (None: every captured table), or ``keys``
    of ``table``."""

    tables: tuple[TableId, ...] | None
    table: TableId | None
    keys: tuple[tuple[Scalar, ...], ...] | None


def shown(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for messages (a request may be huge)."""
    try:
        text = repr(value)
    except ValueError:  # an int with more digits than Python prints
        return f"<{type(value).__name__} too large to show>"
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def check_request(tables: object, table: object, keys: object) -> CheckedRequest:
    """The request in checked form, or DumpRequestError naming what is wrong with it."""
    if keys is None:
        if table is not None:
            raise DumpRequestError(
                f"table {shown(table)} given without keys",
                fix="dump whole tables with tables=[...], or give keys=[[...]] with table")
        return CheckedRequest(None if tables is None else check_tables(tables), None, None)
    if tables is not None:
        raise DumpRequestError("give either tables, or one table with keys, not both")
    if table is None:
        raise DumpRequestError("a dump of keys needs the table they belong to",
                               fix="give table='schema.table' with the keys")
    return CheckedRequest(None, table_name(table), check_keys(keys))


@dataclass(frozen=True, slots=True)
class CheckedRange:
    """A key range of ``table``: keys from ``key_from`` to ``key_to``, both included; an
    end that is None is open. Each end has the shape of a key (a list of scalars)."""

    table: TableId
    key_from: tuple[Scalar, ...] | None
    key_to: tuple[Scalar, ...] | None


def check_range(table: object, key_from: object, key_to: object) -> CheckedRange:
    """The range in checked form, or DumpRequestError naming what is wrong with it. Whether
    ``key_from`` comes before ``key_to`` is the database's to say (a reversed range is empty)."""
    if table is None:
        raise DumpRequestError("a key range needs the table it belongs to",
                               fix="give table='schema.table' with from and/or to")
    low = None if key_from is None else check_key(key_from)
    high = None if key_to is None else check_key(key_to)
    if low is not None and high is not None and len(low) != len(high):
        raise DumpRequestError(f"the range's ends have {len(low)} and {len(high)} value(s): "
                               "each end is a whole key, one value per key column")
    return CheckedRange(table_name(table), low, high)


def table_name(value: object) -> TableId:
    """A ``schema.table`` name (or a TableId) as a TableId; DumpRequestError otherwise."""
    if isinstance(value, TableId):
        value = str(value) if isinstance(value.schema, str) and isinstance(value.name, str) \
            else None
    if not isinstance(value, str):
        raise DumpRequestError(f"a table name must be a string schema.table, got "
                               f"{type(value).__name__} {shown(value)}")
    if not value or len(value) > MAX_NAME_CHARS or "\x00" in value:
        raise DumpRequestError(f"table name {shown(value)} is empty, longer than "
                               f"{MAX_NAME_CHARS} characters or contains a NUL character")
    parsed = TableId.parse(value)
    if not parsed.schema or not parsed.name:
        raise DumpRequestError(f"table name {shown(value)} lacks a schema or a table name",
                               fix="write schema.table, e.g. public.orders")
    return parsed


def check_tables(tables: object) -> tuple[TableId, ...]:
    """The named tables, each once, in the order given."""
    if isinstance(tables, (str, bytes)) or not isinstance(tables, Sequence):
        raise DumpRequestError(f"tables must be a list of schema.table names, got "
                               f"{shown(tables)}", fix='e.g. tables=["public.orders"]')
    if not tables:
        raise DumpRequestError("the list of tables is empty",
                               fix="name at least one table, or give none (tables=None) to "
                                   "dump every captured table")
    if len(tables) > MAX_TABLES:
        raise DumpRequestError(f"{len(tables)} tables in one request, at most {MAX_TABLES}")
    return tuple(dict.fromkeys(table_name(t) for t in tables))


def check_keys(keys: object) -> tuple[tuple[Scalar, ...], ...]:
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence):
        raise DumpRequestError(f"keys must be a list of keys, got {shown(keys)}", fix=KEYS_FIX)
    if not keys:
        raise DumpRequestError("a dump of keys needs at least one key", fix=KEYS_FIX)
    if len(keys) > MAX_KEYS:
        raise DumpRequestError(f"{len(keys)} keys in one request, at most {MAX_KEYS}",
                               fix="split the keys over several requests, or dump the table")
    checked = tuple(check_key(k) for k in keys)
    size = len(json.dumps(checked, ensure_ascii=False).encode())  # orjson: 64-bit ints
    if size > MAX_KEY_BYTES:
        raise DumpRequestError(f"the keys take {size} bytes as JSON, at most {MAX_KEY_BYTES}",
                               fix="split the keys over several requests, or dump the table")
    return checked


def check_key(key: object) -> tuple[Scalar, ...]:
    if isinstance(key, (str, bytes)) or not isinstance(key, Sequence):
        raise DumpRequestError(f"keys must be a list of keys, each a list of values; got the "
                               f"key {shown(key)}", fix=KEYS_FIX)
    if len(key) > MAX_KEY_COLUMNS:
        raise DumpRequestError(f"key {shown(key)} has {len(key)} values, at most "
                               f"{MAX_KEY_COLUMNS}")
    return tuple(check_value(v) for v in key)


def check_value(value: Any) -> Scalar:
    """One key value: a string, a (finite) number or a boolean."""
    if value is None:
        raise DumpRequestError("key values cannot be null (key columns are never null)")
    if isinstance(value, int):  # bool is an int
        if value.bit_length() > MAX_INT_BITS:  # before any str(): huge ints cannot print
            raise DumpRequestError(f"key value of {value.bit_length()} bits is out of range "
                                   f"(at most {MAX_INT_BITS} bits)")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise DumpRequestError(f"key value {value!r} is not a finite number")
        return value
    if isinstance(value, str):
        if len(value) > MAX_VALUE_CHARS:
            raise DumpRequestError(f"key value {shown(value)} is longer than "
                                   f"{MAX_VALUE_CHARS} characters")
        return value
    raise DumpRequestError(f"a key value must be a string, number or boolean, got "
                           f"{type(value).__name__} {shown(value)}")
