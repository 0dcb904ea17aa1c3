"""Keyset chunk SELECTs and watermark writes (steps 2-4 of the algorithm).

Chunk bounds and order come from the server (``ORDER BY`` the key, row-value ``>``), never from
Python comparisons; key values are normalised under each column's collation (collation.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dblog.core.model import EncodedRow, Key, Row, TableId, TableInfo
from dblog.errors import DumpRequestError, FatalSourceError
from dblog.spi import Chunk

from . import catalog
from .collation import key_converter
from .db import DriverError, Endpoint, connect, query, quote
from .errors import classify
from .keys import parse_keys
from .types import (
    base_type,
    dump_converter,
    identity,
    json_expression,
    key_binder,
    key_placeholder,
    select_expression,
)

RowDecoder = Callable[[tuple[Any, ...]], tuple[Key, Any]]
_DATES = frozenset({"date", "datetime", "timestamp"})


def row_decoder(info: TableInfo) -> RowDecoder:
    """Raw SELECT tuples to (canonical key, canonical row)."""
    names = [c.name for c in info.columns]
    converters = [dump_converter(c.type_name) for c in info.columns]
    convert_at = [(i, f) for i, f in enumerate(converters) if f is not identity]
    collations = info.extra.get("collations", {})
    key_at = []
    for name in info.key_columns:
        norm = key_converter(collations.get(name))
        key_at.append((names.index(name), norm))

    def decode(raw: tuple[Any, ...]) -> tuple[Key, Row]:
        values = list(raw)
        for i, convert in convert_at:
            values[i] = convert(values[i])
        key = tuple(values[i] if norm is None else norm(values[i]) for i, norm in key_at)
        return key, dict(zip(names, values, strict=True))

    return decode


def encoded_select(info: TableInfo) -> str | None:
    """The key columns, then the row as one ``JSON_OBJECT`` with canonical values, when every
    column has an exact JSON form (see ``types.json_expression``); otherwise None."""
    collations = info.extra.get("collations", {})
    parts = []
    for column in info.columns:
        expression = json_expression(column.type_name, collations.get(column.name))
        if expression is None:
            return None
        name = column.name.replace("\\", "\\\\").replace("'", "''").replace("%", "%%")
        parts.append(f"'{name}', " + expression.format(col=quote(column.name)))
    keys = ", ".join(quote(k) for k in info.key_columns)
    return f"{keys}, JSON_OBJECT({', '.join(parts)})"


def _key_converters(info: TableInfo) -> list[Callable[[Any], Any] | None]:
    """Per key column: the canonical conversion and the collation normaliser, or None."""
    types = {c.name: c.type_name for c in info.columns}
    collations = info.extra.get("collations", {})
    out: list[Callable[[Any], Any] | None] = []
    for name in info.key_columns:
        convert, norm = dump_converter(types[name]), key_converter(collations.get(name))
        if norm is not None:
            out.append(norm)  # character columns: the driver gives str already
        elif convert is not identity:
            out.append(convert)
        else:
            out.append(None)
    return out


def encoded_decoder(info: TableInfo) -> RowDecoder:
    converters = _key_converters(info)
    count = len(converters)
    if converters == [None]:  # one key column that needs no conversion (integers)
        def decode_one(raw: tuple[Any, ...]) -> tuple[Key, Any]:
            return (raw[0],), EncodedRow(raw[1])

        return decode_one

    def decode(raw: tuple[Any, ...]) -> tuple[Key, Any]:
        key = tuple(v if f is None or v is None else f(v)
                    for v, f in zip(raw[:count], converters, strict=True))
        return key, EncodedRow(raw[count])

    return decode


class _Queries:
    """The SQL of one table version (its columns), composed once with quoted identifiers.

    When every column has an exact JSON form, the server encodes each row (``JSON_OBJECT``), so
    a dump row costs Python almost nothing (the fast path); other tables take the plain path
    (a tuple per row, converted in Python)."""

    def __init__(self, info: TableInfo, version: int) -> None:
        self.info = info
        self.version = version
        types = {c.name: c.type_name for c in info.columns}
        collations = info.extra.get("collations", {})
        self.key_types = [types[k] for k in info.key_columns]
        self.binders = [key_binder(types[k], collations.get(k)) for k in info.key_columns]
        # a zero date has no canonical key (types.py): such keys are refused (_check_keys)
        self.zero_dates = any(base_type(t) in _DATES for t in self.key_types)
        table = f"{quote(info.table.schema)}.{quote(info.table.name)}"
        plain = ", ".join(select_expression(c.type_name).format(col=quote(c.name))
                          + f" AS {quote(c.name)}" for c in info.columns)
        encoded = encoded_select(info)
        select = encoded or plain
        keys = [f"{table}.{quote(k)}" for k in info.key_columns]
        self.keys = ", ".join(keys)
        places = [key_placeholder(t) for t in self.key_types]
        marks = ", ".join(places)
        self.base = f"SELECT {select} FROM {table}"
        if len(keys) == 1:
            self.above, self.upto = f"{keys[0]} > {marks}", f"{keys[0]} <= {marks}"
            self.from_ = f"{keys[0]} >= {marks}"
            self.one_key = marks
        else:  # the leading column's own bound lets the optimizer use a range on the index
            self.above = f"{keys[0]} >= {places[0]} AND ({self.keys}) > ({marks})"
            self.from_ = f"{keys[0]} >= {places[0]} AND ({self.keys}) >= ({marks})"
            self.upto = f"({self.keys}) <= ({marks})"
            self.one_key = f"({marks})"
        self.order = f" ORDER BY {self.keys}"
        desc = ", ".join(f"{k} DESC" for k in keys)
        self.max_key = f"SELECT {plain} FROM {table} ORDER BY {desc} LIMIT 1"
        self.decode_plain = row_decoder(info)
        self.decode = encoded_decoder(info) if encoded else self.decode_plain

    def params(self, key: Key) -> list[Any]:
        return [bind(v) for bind, v in zip(self.binders, key, strict=True)]

    def check_keys(self, rows: list[Any]) -> list[Any]:
        """The rows, unless a key holds a zero date (``0000-00-00``, ``2024-00-15``): its
        canonical value is null, which no chunk bound or log event can tell apart from
        another zero date, so the dump stops there rather than skip rows."""
        if self.zero_dates and any(None in key for key, _ in rows):
            columns = [k for k, t in zip(self.info.key_columns, self.key_types, strict=True)
                       if base_type(t) in _DATES]
            table = self.info.table
            raise DumpRequestError(
                f"a row of {table} has a zero date (or a date with a zero month or day) in "
                f"its key column(s) {columns}: such a key has no canonical value, so the "
                "dump cannot read past it",
                fix=f"give those rows real dates (UPDATE {quote(table.schema)}."
                    f"{quote(table.name)} SET ... WHERE <column> = '0000-00-00' ...), or name "
                    "a unique, non-null key without zero dates in source.key_columns")
        return rows

    def above_params(self, key: Key) -> list[Any]:
        values = self.params(key)
        return values if len(values) == 1 else [values[0], *values]

    def chunk(self, after: Key | None, upper: Key | None, limit: int,
              inclusive: bool = False) -> tuple[str, list[Any]]:
        """The chunk SELECT: keys above ``after`` (from it, ``inclusive``), up to ``upper``."""
        where, params = [], []
        if after is not None:
            where.append(self.from_ if inclusive else self.above)
            params += self.above_params(after)
        if upper is not None:
            where.append(self.upto)
            params += self.params(upper)
        sql = self.base + (" WHERE " + " AND ".join(where) if where else "")
        return sql + self.order + " LIMIT %s", [*params, limit]


class MysqlChunkReader:
    """A :class:`dblog.spi.ChunkReader`; each chunk SELECT is its own READ COMMITTED
    transaction (autocommit), so it starts after the low watermark committed."""

    def __init__(self, endpoint: Endpoint, patterns: Sequence[str],
                 key_columns: Mapping[TableId, tuple[str, ...]],
                 watermark_table: TableId | None = None,
                 schema_versions: Mapping[TableId, int] | None = None) -> None:
        self.conn = connect(endpoint)
        query(self.conn, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        self.patterns = list(patterns)
        self.key_columns = dict(key_columns)
        self.watermark_table = watermark_table
        self.schema_versions = schema_versions if schema_versions is not None else {}
        self._queries: dict[TableId, _Queries] = {}

    def list_tables(self) -> list[TableId]:
        return catalog.list_tables(self.conn, self.patterns, self.watermark_table)

    def table_info(self, table: TableId, key_columns: Sequence[str] | None = None) -> TableInfo:
        if table == self.watermark_table or not catalog.matches(table, self.patterns):
            raise DumpRequestError(f"table {table} is not captured by this pipeline",
                                   fix=f"add it to source.tables (now {self.patterns})")
        version = self.schema_versions.get(table, 0)
        info = catalog.table_info(self.conn, table, key_columns or self.key_columns.get(table))
        self._queries[table] = _Queries(info, version)
        return info

    def forget_table(self, table: TableId) -> None:
        """A :class:`dblog.spi.ForgettingChunkReader`: a query met a changed table (a DDL the
        log reader has not seen yet), so its columns are read again at the next query."""
        self._queries.pop(table, None)

    def _q(self, info: TableInfo) -> _Queries:
        """The table's queries, with the columns read again after the log reader saw a DDL
        statement for it (the engine's TableInfo may predate it)."""
        version = self.schema_versions.get(info.table, 0)
        q = self._queries.get(info.table)
        if q is None or q.version != version or q.info.key_columns != info.key_columns:
            fresh = catalog.table_info(self.conn, info.table, info.key_columns)
            q = self._queries[info.table] = _Queries(fresh, version)
        return q

    def _rows(self, q: _Queries, sql: str, params: Sequence[Any], what: str,
              decode: RowDecoder | None = None) -> list[Any]:
        decode = decode or q.decode
        try:
            with self.conn.cursor() as cur:
                cur.execute(sql, params)
                return [decode(r) for r in cur.fetchall()]
        except DriverError as exc:
            raise classify(exc, what) from exc

    def max_key(self, info: TableInfo) -> Key | None:
        q = self._q(info)
        rows = q.check_keys(self._rows(q, q.max_key, (),
                                       f"reading the maximum key of {info.table}",
                                       q.decode_plain))
        return rows[0][0] if rows else None

    def read_chunk(self, info: TableInfo, after: Key | None, upper: Key | None,
                   limit: int, inclusive: bool = False) -> Chunk:
        q = self._q(info)
        sql, params = q.chunk(after, upper, limit, inclusive)
        return Chunk(q.check_keys(self._rows(q, sql, params, f"reading a chunk of {info.table}")))

    def read_keys(self, info: TableInfo, keys: Sequence[Key]) -> Chunk:
        if not keys:
            return Chunk([])
        q = self._q(info)
        sql = f"{q.base} WHERE ({q.keys}) IN ({', '.join([q.one_key] * len(keys))}){q.order}"
        params = [p for key in keys for p in q.params(key)]
        return Chunk(self._rows(q, sql, params, f"reading keys of {info.table}"))

    def parse_key(self, info: TableInfo, values: Sequence[object]) -> Key:
        return self.parse_keys(info, [values])[0]

    def parse_keys(self, info: TableInfo, keys: Sequence[Sequence[object]]) -> list[Key]:
        """A :class:`dblog.spi.KeyListParser`: each value checked against its key column's
        type and range and brought to the canonical form (keys.py), no round trip."""
        return parse_keys(info, keys)

    def close(self) -> None:
        self.conn.close()


class MysqlWatermarkWriter:
    """Updates this instance's row of the watermark table, each write its own transaction."""

    def __init__(self, endpoint: Endpoint, table: TableId, instance: str) -> None:
        self.conn = connect(endpoint)
        self.instance = instance
        self.sql = (f"UPDATE {quote(table.schema)}.{quote(table.name)} "
                    "SET value = %s, updated_at = NOW(6) WHERE name = %s")

    def write(self, value: str) -> None:
        try:
            with self.conn.cursor() as cur:
                changed = cur.execute(self.sql, (value, self.instance))
        except DriverError as exc:
            raise classify(exc, "writing the watermark") from exc
        if changed != 1:
            raise FatalSourceError(f"watermark row for instance {self.instance!r} is missing",
                                   fix="restart the pipeline: prepare() creates it")

    def close(self) -> None:
        self.conn.close()
