"""Keyset chunk SELECTs and watermark writes (steps 2-4 of the algorithm)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql

from dblog.errors import DumpRequestError, FatalSourceError
from dblog.model import EncodedRow, Key, Row, TableId, TableInfo
from dblog.spi import Chunk

from . import catalog
from .errors import classify
from .types import INT_TYPES, base_type, converter_for, key_param, select_expression

# The statement's snapshot (``xmin:xmax:xip,...``), then ``;`` and those of its in-progress
# transactions whose commit is already logged. Added as a last column that only the first row
# fills: one statement has one snapshot, so no explicit transaction is needed.
SNAPSHOT_COLUMN = (
    "CASE WHEN row_number() OVER () = 1 THEN (SELECT txid_current_snapshot()::text || ';' || "
    "array_to_string(ARRAY(SELECT x FROM txid_snapshot_xip(txid_current_snapshot()) AS x "
    "WHERE txid_status(x) = 'committed'), ',')) END"
)


def _txids(text: str) -> frozenset[int]:
    """Comma-separated transaction ids as the 32-bit ids wal2json prints."""
    return frozenset(int(x) & 0xFFFFFFFF for x in text.split(",") if x)


def parse_snapshot(text: str | None) -> tuple[frozenset[int], frozenset[int]]:
    """(in-progress txids, those already committed in clog) from the snapshot column."""
    if not text:
        return frozenset(), frozenset()
    snapshot, _, logged = text.partition(";")
    parts = snapshot.split(":")
    return _txids(parts[2] if len(parts) == 3 else ""), _txids(logged)


RowDecoder = Callable[[tuple[Any, ...]], tuple[Key, Row | EncodedRow]]
ORDER_PRESERVING = INT_TYPES | {"text", "character varying", "varchar"}


def connect(dsn: str, options: str = "") -> psycopg.Connection:
    try:
        conn = psycopg.connect(dsn, autocommit=True,
                               options=f"-c datestyle=ISO -c timezone=UTC {options}".strip())
    except psycopg.Error as exc:
        raise classify(exc, "connecting to the source") from exc
    return conn


def _row_decoder(info: TableInfo) -> RowDecoder:
    """Rows come back canonical already (see ``select_expression``): only zip and pick the key."""
    names = [c.name for c in info.columns]
    key_index = [names.index(k) for k in info.key_columns]
    if len(key_index) == 1:
        index = key_index[0]

        def decode_one(raw: tuple[Any, ...]) -> tuple[Key, Row | EncodedRow]:
            return (raw[index],), dict(zip(names, raw, strict=True))

        return decode_one

    def decode(raw: tuple[Any, ...]) -> tuple[Key, Row | EncodedRow]:
        return tuple(raw[i] for i in key_index), dict(zip(names, raw, strict=True))

    return decode


def _without_snapshot(decode: RowDecoder) -> RowDecoder:
    """The plain decoder for chunk rows, which end with the snapshot column."""
    return lambda raw: decode(raw[:-1])


class _Queries:
    """The SQL of one table, composed once with quoted identifiers.

    When every key column's canonical expression sorts like the column (integers, text), the
    server also encodes each row as JSON (``row_to_json``), so a dump row costs Python almost
    nothing; other keys take the plain path (a tuple per row, zipped into a dict).
    """

    def __init__(self, info: TableInfo) -> None:
        types = {c.name: c.type_name for c in info.columns}
        self.key_types = [types[k] for k in info.key_columns]
        self.encoded = all(base_type(t) in ORDER_PRESERVING for t in self.key_types)
        self.table = sql.Identifier(info.table.schema, info.table.name)
        # plain path: aliases keep ORDER BY on the typed columns, not on the expressions
        alias = (lambda i, c: f"_c{i}") if not self.encoded else (lambda i, c: c)
        self.select = sql.SQL(", ").join(
            sql.SQL(select_expression(c.type_name) + " AS {alias}").format(
                col=sql.Identifier(c.name), alias=sql.Identifier(alias(i, c.name)))
            for i, c in enumerate(info.columns))
        self.keys = sql.SQL(", ").join(sql.Identifier(k) for k in info.key_columns)
        self.outer_keys = sql.SQL(", ").join(sql.Identifier("x", k) for k in info.key_columns)
        typed = sql.SQL(", ").join(sql.SQL("%s::{}").format(sql.SQL(t)) for t in self.key_types)
        above = sql.SQL("({}) > ({})").format(self.keys, typed)
        upto = sql.SQL("({}) <= ({})").format(self.keys, typed)
        self.first = self.compose(None, limit=True)
        self.after = self.compose(above, limit=True)
        self.first_upto = self.compose(upto, limit=True)
        self.after_upto = self.compose(above + sql.SQL(" AND ") + upto, limit=True)
        desc = sql.SQL(", ").join(sql.SQL("{} DESC").format(sql.Identifier(k))
                                  for k in info.key_columns)
        plain_select = sql.SQL(", ").join(
            sql.SQL(select_expression(c.type_name) + " AS {alias}").format(
                col=sql.Identifier(c.name), alias=sql.Identifier(f"_c{i}"))
            for i, c in enumerate(info.columns))
        self.max_key = sql.SQL("SELECT {} FROM {} ORDER BY {} LIMIT 1").format(
            plain_select, self.table, desc)
        self.one_key = sql.SQL("({})").format(typed)
        self.decode_plain = _row_decoder(info)
        self.decode = _encoded_decoder(len(info.key_columns)) if self.encoded \
            else _without_snapshot(self.decode_plain)

    def compose(self, where: sql.Composable | None, limit: bool) -> sql.Composed:
        inner = sql.SQL("SELECT {} FROM {}").format(self.select, self.table)
        if where is not None:
            inner += sql.SQL(" WHERE ") + where
        inner += sql.SQL(" ORDER BY {}").format(self.keys)
        if limit:
            inner += sql.SQL(" LIMIT %s")
        # the window function runs over the limited rows; the subquery's order is kept
        if not self.encoded:
            return sql.SQL("SELECT x.*, " + SNAPSHOT_COLUMN + " FROM ({}) x").format(inner)
        return sql.SQL("SELECT {}, row_to_json(x)::text, " + SNAPSHOT_COLUMN +
                       " FROM ({}) x ORDER BY {}").format(self.outer_keys, inner, self.outer_keys)

    def params(self, key: Key) -> list[Any]:
        return [key_param(t, v) for t, v in zip(self.key_types, key, strict=True)]


def _encoded_decoder(nkeys: int) -> RowDecoder:
    def decode(raw: tuple[Any, ...]) -> tuple[Key, Row | EncodedRow]:
        return raw[:nkeys], EncodedRow(raw[nkeys])

    return decode


class PostgresChunkReader:
    """A :class:`dblog.spi.ChunkReader`; each chunk SELECT runs in its own READ COMMITTED
    transaction (autocommit), so it starts after the low watermark committed."""

    def __init__(self, dsn: str, patterns: Sequence[str],
                 key_columns: Mapping[TableId, tuple[str, ...]],
                 watermark_table: TableId | None = None) -> None:
        self.conn = connect(dsn)
        self.watermark_table = watermark_table
        self.patterns = list(patterns)
        self.key_columns = dict(key_columns)
        self._queries: dict[TableId, _Queries] = {}

    def list_tables(self) -> list[TableId]:
        return catalog.list_tables(self.conn, self.patterns, self.watermark_table)

    def table_info(self, table: TableId, key_columns: Sequence[str] | None = None) -> TableInfo:
        if table == self.watermark_table or (
                self.patterns and not catalog.matches(table, self.patterns)):
            raise DumpRequestError(f"table {table} is not captured by this pipeline",
                                   fix=f"add it to source.tables (now {self.patterns})")
        info = catalog.table_info(self.conn, table, key_columns or self.key_columns.get(table))
        self._queries[table] = _Queries(info)
        return info

    def _q(self, info: TableInfo) -> _Queries:
        if info.table not in self._queries:
            self._queries[info.table] = _Queries(info)
        return self._queries[info.table]

    def _fetch(self, query: sql.Composable, params: Sequence[Any], what: str) -> list[Any]:
        try:
            return self.conn.execute(query, params).fetchall()
        except psycopg.Error as exc:
            raise classify(exc, what) from exc

    def _fetch_chunk(self, q: _Queries, query: sql.Composable, params: Sequence[Any],
                     what: str) -> Chunk:
        """One chunk in one statement (autocommit: its snapshot is taken now, after L
        committed); the first row also carries the snapshot's in-progress transactions."""
        rows = self._fetch(query, params, what)
        snapshot = next((r[-1] for r in rows if r[-1] is not None), None)
        pending, logged = parse_snapshot(snapshot)
        decode = q.decode
        return Chunk([decode(r) for r in rows], pending, logged)

    def max_key(self, info: TableInfo) -> Key | None:
        q = self._q(info)
        rows = self._fetch(q.max_key, (), f"reading the maximum key of {info.table}")
        return q.decode_plain(rows[0])[0] if rows else None

    def read_chunk(self, info: TableInfo, after: Key | None, upper: Key | None,
                   limit: int) -> list[tuple[Key, Row]]:
        q = self._q(info)
        if after is None and upper is None:
            query, params = q.first, [limit]
        elif after is None:
            query, params = q.first_upto, [*q.params(upper or ()), limit]
        elif upper is None:
            query, params = q.after, [*q.params(after), limit]
        else:
            query, params = q.after_upto, [*q.params(after), *q.params(upper), limit]
        return self._fetch_chunk(q, query, params, f"reading a chunk of {info.table}")

    def read_keys(self, info: TableInfo, keys: Sequence[Key]) -> Chunk:
        if not keys:
            return Chunk([])
        q = self._q(info)
        listed = sql.SQL("({}) IN ({})").format(
            q.keys, sql.SQL(", ").join([q.one_key] * len(keys)))
        query = q.compose(listed, limit=False)
        params = [p for key in keys for p in q.params(key)]
        return self._fetch_chunk(q, query, params, f"reading keys of {info.table}")

    def parse_key(self, info: TableInfo, values: Sequence[object]) -> Key:
        if isinstance(values, (str, bytes)) or len(values) != len(info.key_columns):
            raise DumpRequestError(
                f"a key of {info.table} has {len(info.key_columns)} value(s) "
                f"({', '.join(info.key_columns)}), got {values!r}")
        types = {c.name: c.type_name for c in info.columns}
        try:
            return tuple(converter_for(types[k])(None if v is None else str(v))
                         for k, v in zip(info.key_columns, values, strict=True))
        except (TypeError, ValueError) as exc:
            raise DumpRequestError(f"malformed key {values!r} for {info.table}: {exc}") from exc

    def close(self) -> None:
        self.conn.close()


class PostgresWatermarkWriter:
    """Updates this instance's row of the watermark table, each write its own transaction."""

    def __init__(self, dsn: str, table: TableId, instance: str) -> None:
        # the walsender only sends flushed WAL: with asynchronous commit a watermark could wait
        # for the WAL writer (wal_writer_delay, 200 ms by default) before its window can close
        self.conn = connect(dsn, "-c synchronous_commit=on")
        self.instance = instance
        self.query = sql.SQL("UPDATE {} SET value = %s, updated_at = now() WHERE name = %s"
                             ).format(sql.Identifier(table.schema, table.name))

    def write(self, value: str) -> None:
        try:
            cur = self.conn.execute(self.query, (value, self.instance))
        except psycopg.Error as exc:
            raise classify(exc, "writing the watermark") from exc
        if cur.rowcount != 1:
            raise FatalSourceError(f"watermark row for instance {self.instance!r} is missing",
                                   fix="restart the pipeline: prepare() creates it")

    def close(self) -> None:
        self.conn.close()
