"""Binlog row and query events (as mysql-replication parses them) to dblog log items.

No I/O here except through ``key_columns_of``. Column names, types, charsets, collations and
ENUM/SET labels come from each table map event (``binlog_row_metadata=FULL``), so rows logged
before a DDL decode with the columns they had then. Row decoding stays behind this class and
:class:`connectors.mysql.binlog.MysqlLogReader`, so a faster row parser can replace
mysql-replication's without touching the rest.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

from pymysqlreplication.constants import NONE_SOURCE

from dblog.core.model import ChangeEvent, Key, LogItem, Op, Row, TableId, Watermark
from dblog.core.positions import Position
from dblog.errors import FatalSourceError

from . import catalog
from .collation import key_converter
from .flavor import Flavor
from .nativetypes import to_geometry_hex, to_inet4, to_inet6, to_uuid
from .rowcodec import codec_for
from .statements import NAME, QUALIFIED, statement_body, table_named
from .types import (
    Converter,
    identity,
    padded_hex,
    set_converter,
    to_bit,
    to_date,
    to_datetime,
    to_decimal,
    to_float32,
    to_hex,
    to_text,
    to_time,
    to_timestamp,
)

_EMPTY_SET = NONE_SOURCE.EMPTY_SET
_INTS = frozenset({1, 2, 3, 8, 9, 13})
_STRINGS = frozenset({15, 249, 250, 251, 252, 253, 254})
_BY_TYPE: dict[int, Converter] = {
    246: to_decimal, 4: to_float32, 5: identity, 10: to_date, 14: to_date, 7: to_timestamp,
    12: to_datetime, 17: to_timestamp, 18: to_datetime, 11: to_time, 19: to_time, 16: to_bit,
    247: to_text, 255: to_geometry_hex,
}
# MariaDB's own types travel in the binlog as fixed binary strings; the catalog names them
_NATIVE: dict[tuple[str, int], Converter] = {("uuid", 16): to_uuid, ("inet4", 4): to_inet4,
                                             ("inet6", 16): to_inet6}


def log_converter(column: Any, flavor: Flavor, declared: str | None = None) -> Converter:
    """The converter for one binlog column (mysql-replication's column object); ``declared``:
    the column's base type in the catalog, which tells MariaDB's UUID/INET4/INET6 apart from
    BINARY(n)."""
    kind = column.type
    if kind in _INTS:
        return identity
    if kind == 245:
        return flavor.json_converter()
    if kind == 248:
        return set_converter(tuple(column.set_values or ()))
    if kind in _STRINGS:
        if getattr(column, "character_set_name", None) == "binary":
            if kind == 254:
                width = int(getattr(column, "max_length", 0) or 0)
                return _NATIVE.get((declared or "", width)) or padded_hex(width)
            return to_hex
        return to_text
    converter = _BY_TYPE.get(kind)
    if converter is None:
        raise FatalSourceError(
            f"column {column.name!r} has binlog type {kind}, which the connector cannot "
            "decode into the same value as a chunk SELECT",
            fix="leave the table out of source.tables (dblog check lists such columns)")
    return converter


_WIDE = (("utf16le_", "utf-16-le"), ("utf16_", "utf-16-be"), ("utf32_", "utf-32-be"),
         ("ucs2_", "utf-16-be"))


def _wide_codec(collation: str | None) -> str | None:
    """MySQL's UTF-16/32 and UCS-2 are big-endian without a BOM; mysql-replication would
    decode them with the machine's byte order."""
    for prefix, codec in _WIDE:
        if collation and collation.startswith(prefix):
            return codec
    return None


def _fix_wide_charsets(columns: Sequence[Any]) -> None:
    """Name the Python codec as the column charset: mysql-replication decodes with a charset
    name it does not know as that codec (before the rows are read)."""
    for column in columns:
        codec = _wide_codec(getattr(column, "collation_name", None))
        if codec is not None:
            column.character_set_name = codec


def _key_reader(key_at: Sequence[tuple[str, Callable[[Any], Any] | None]]
                ) -> Callable[[Row], Key | None]:
    """The key of a row image (None when a key column is missing); called twice per update,
    so a key without collation-folded columns is read without a per-column loop."""
    if not key_at:
        return lambda row: None
    names = [k for k, _ in key_at]
    if all(n is None for _, n in key_at):
        if len(names) == 1:
            name = names[0]

            def single(row: Row) -> Key | None:
                try:
                    return (row[name],)
                except KeyError:
                    return None

            return single
        get = itemgetter(*names)  # several names: a tuple

        def plain(row: Row) -> Key | None:
            try:
                return get(row)  # type: ignore[no-any-return]
            except KeyError:
                return None

        return plain

    def folded(row: Row) -> Key | None:
        try:
            return tuple(row[k] if n is None else n(row[k]) for k, n in key_at)
        except KeyError:
            return None

    return folded


class TablePlan:
    """How to turn one table's binlog rows into canonical rows and keys."""

    __slots__ = ("codec", "convert_at", "key_of", "sets", "table", "watermark",
                 "wide_charsets")

    def __init__(self, table: TableId, watermark: bool, columns: Sequence[Any],
                 keys: tuple[str, ...], flavor: Flavor,
                 declared: dict[str, str] | None = None, fast: bool = True) -> None:
        self.table = table
        self.watermark = watermark
        types = declared or {}
        self.codec = codec_for(columns, flavor, types) if fast else None
        self.convert_at = [(c.name, f) for c in columns
                           if (f := log_converter(c, flavor, types.get(c.name))) is not identity]
        self.sets = tuple(c.name for c in columns if c.type == 248)
        self.wide_charsets = any(_wide_codec(getattr(c, "collation_name", None))
                                 for c in columns)
        collations = {c.name: getattr(c, "collation_name", None) for c in columns}
        self.key_of = _key_reader([(k, key_converter(collations.get(k))) for k in keys])

    def row(self, values: dict[str, Any], nones: dict[str, Any] | None = None) -> Row:
        row = values  # mysql-replication builds a fresh dict per row image: convert in place
        for name, convert in self.convert_at:
            value = row.get(name)
            if value is not None:
                row[name] = convert(value)
        if self.sets and nones:  # mysql-replication gives None for an empty SET, not ''
            for name in self.sets:
                if nones.get(name) == _EMPTY_SET:
                    row[name] = ""
        return row


class BinlogDecoder:
    def __init__(self, instance: str, watermark_table: TableId, flavor: Flavor,
                 patterns: Sequence[str],
                 key_columns_of: Callable[[TableId, bool], tuple[str, ...]],
                 column_types_of: Callable[[TableId], dict[str, str]] | None = None) -> None:
        self.instance = instance
        self.watermark_table = watermark_table
        self.flavor = flavor
        self.patterns = list(patterns)
        self.key_columns_of = key_columns_of
        self.column_types_of = column_types_of or (lambda table: {})
        self._plans: dict[tuple[Any, ...], TablePlan | None] = {}
        self._signatures: dict[int, tuple[Any, tuple[Any, ...]]] = {}
        self._known: set[tuple[str, str]] = set()  # tables seen in table maps

    def captured(self, table: TableId) -> bool:
        return table != self.watermark_table and catalog.matches(table, self.patterns)

    def _signature(self, event: Any) -> tuple[Any, ...]:
        """The table and every column's table-map metadata (type, signedness, lengths,
        precision, fractional digits, collation, ENUM/SET labels, ...): a table map that
        differs in any of them is another table version and gets its own plan. Memoised per
        column list (mysql-replication keeps one per table id)."""
        columns = event.columns
        memo = self._signatures.get(id(columns))
        if memo is not None and memo[0] is columns:
            return memo[1]
        signature = (event.schema, event.table, *(_column_metadata(c) for c in columns))
        if len(self._signatures) >= 4096:
            self._signatures.clear()
        self._signatures[id(columns)] = (columns, signature)
        self._known.add((event.schema, event.table))
        return signature

    def _plan(self, event: Any) -> TablePlan | None:
        columns = event.columns
        signature = self._signature(event)
        plan = self._plans.get(signature, self)
        if plan is self:
            table = TableId(event.schema, event.table)
            watermark = table == self.watermark_table
            if watermark or self.captured(table):
                keys = ("name",) if watermark else self.key_columns_of(table, False)
                declared = {} if watermark else self.column_types_of(table)
                plan = TablePlan(table, watermark, columns, keys, self.flavor, declared)
            else:
                plan = None
            self._plans[signature] = plan
        return plan  # type: ignore[return-value]

    def rows(self, event: Any, op: Op, position: Position, txid: int | None,
             ts: str | None) -> list[LogItem]:
        plan = self._plan(event)
        if plan is None:
            return []
        if plan.codec is None:
            return self._legacy_rows(plan, event, op, position, txid, ts)
        return self.from_images(plan, op, plan.codec.images(event), position, txid, ts)

    def plan_for(self, event: Any) -> TablePlan | None:
        """The (cached) plan of a rows event's table version; None: not captured."""
        return self._plan(event)

    def from_images(self, plan: TablePlan, op: Op, images: list[Row], position: Position,
                    txid: int | None, ts: str | None) -> list[LogItem]:
        """Log items of one rows event's decoded images (an update: before, after, ...)."""
        if plan.watermark:
            return self._watermarks(images[1::2] if op is Op.UPDATE else images, op, position)
        table, key_of = plan.table, plan.key_of
        if op is Op.INSERT:
            return [ChangeEvent(op, table, key_of(after), None, after, position, txid, ts)
                    for after in images]
        if op is Op.DELETE:
            return [ChangeEvent(op, table, key_of(before), before, None, position, txid, ts)
                    for before in images]
        items: list[LogItem] = []
        for i in range(0, len(images), 2):
            before, after = images[i], images[i + 1]
            key, old = key_of(after), key_of(before)
            items.append(ChangeEvent(op, table, key, before, after, position, txid, ts,
                                     old if old != key else None))
        return items

    def _legacy_rows(self, plan: TablePlan, event: Any, op: Op, position: Position,
                     txid: int | None, ts: str | None) -> list[LogItem]:
        """Rows parsed by mysql-replication, for tables the connector's decoder does not take
        (MySQL 8 binary JSON, pre-5.6 temporal formats)."""
        if plan.wide_charsets:
            _fix_wide_charsets(event.columns)
        if plan.watermark:
            return self._watermarks([raw["after_values"] if op is Op.UPDATE else raw["values"]
                                     for raw in event.rows], op, position)
        table, key_of = plan.table, plan.key_of
        items: list[LogItem] = []
        for raw in event.rows:
            if op is Op.UPDATE:
                before = plan.row(raw["before_values"], raw.get("before_none_sources"))
                after = plan.row(raw["after_values"], raw.get("after_none_sources"))
                key, old = key_of(after), key_of(before)
                items.append(ChangeEvent(op, table, key, before, after, position, txid, ts,
                                         old if old != key else None))
            elif op is Op.INSERT:
                after = plan.row(raw["values"], raw.get("none_sources"))
                items.append(ChangeEvent(op, table, key_of(after), None, after, position,
                                         txid, ts))
            else:
                before = plan.row(raw["values"], raw.get("none_sources"))
                items.append(ChangeEvent(op, table, key_of(before), before, None, position,
                                         txid, ts))
        return items

    def _watermarks(self, images: Sequence[Row], op: Op, position: Position) -> list[LogItem]:
        if op is Op.DELETE:
            return []
        return [Watermark(str(values.get("value")), position) for values in images
                if values.get("name") == self.instance]

    def ddl(self, query: str, schema: str, position: Position, txid: int | None,
            ts: str | None) -> list[LogItem]:
        """Schema-change (or truncate) events for the captured tables a DDL statement names;
        cached key columns of those tables are refreshed."""
        op, tables = parse_ddl(query, schema)
        out: list[LogItem] = []
        for table in self._as_logged(tables):
            if not self.captured(table):
                continue
            if op is Op.SCHEMA:
                self._plans = {s: p for s, p in self._plans.items() if s[:2] != (
                    table.schema, table.name)}
                self._signatures.clear()
                self.key_columns_of(table, True)
            out.append(ChangeEvent(op, table, position=position, txid=txid, commit_ts=ts))
        return out

    def _as_logged(self, tables: Sequence[TableId]) -> list[TableId]:
        """The tables a DDL names, plus each table seen in the log whose name differs only
        in letter case (lower_case_table_names=1 stores and logs names in lower case; a DDL is
        logged as written). On a case-sensitive server the extra table only gets a harmless
        schema-change event (its chunk is read again)."""
        out = list(tables)
        for table in tables:
            folded = (table.schema.lower(), table.name.lower())
            out += [TableId(s, n) for s, n in sorted(self._known)
                    if (s.lower(), n.lower()) == folded and TableId(s, n) not in out]
        return out


def _column_metadata(column: Any) -> tuple[Any, ...]:
    """A column's table-map metadata as a hashable tuple (mysql-replication's Column keeps
    it as attributes; ``character_set_name`` is left out: the legacy path renames it)."""
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                        for k, v in vars(column).items()
                        if not k.startswith("_") and k != "character_set_name"))


_FORMS = [
    (Op.TRUNCATE, re.compile(rf"^TRUNCATE\s+(?:TABLE\s+)?({QUALIFIED})", re.I)),
    (Op.SCHEMA, re.compile(rf"^(?:ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?TABLE|CREATE\s+(?:OR\s+"
                           rf"REPLACE\s+)?TABLE|DROP\s+TABLE)\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?"
                           rf"((?:{QUALIFIED})(?:\s*,\s*{QUALIFIED})*)", re.I)),
    (Op.SCHEMA, re.compile(r"^RENAME\s+TABLES?\s+(.*)$", re.I | re.S)),
    (Op.SCHEMA, re.compile(rf"^(?:CREATE|DROP)\s+(?:(?:UNIQUE|FULLTEXT|SPATIAL|OR\s+REPLACE)\s+)*"
                           rf"INDEX\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?{NAME}\s+(?:ON\s+)"
                           rf"({QUALIFIED})", re.I)),
]


def parse_ddl(query: str, schema: str) -> tuple[Op, list[TableId]]:
    """The tables a DDL statement changes (``schema``: the statement's default database)."""
    text = statement_body(query)
    for op, form in _FORMS:
        match = form.match(text)
        if match:
            names = re.findall(QUALIFIED, match.group(1))
            names = [n for n in names if n.upper() not in ("TO", "WAIT", "NOWAIT")]
            return op, [table_named(n, schema) for n in names]
    return Op.SCHEMA, []
