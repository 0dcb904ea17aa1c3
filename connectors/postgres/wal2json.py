"""Decoding of wal2json format-version 2 messages into dblog log items (no I/O here)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import Any

import msgspec

from dblog.connectors.postgres.positions import Lsn
from dblog.core.model import ChangeEvent, Key, LogItem, Op, Row, TableId, Watermark
from dblog.errors import FatalSourceError

from .catalog import ToastShape
from .types import FLOAT_TYPES, Converter, base_type, converter_for


class Column(msgspec.Struct, gc=False):
    """One entry of a message's ``columns``, ``identity`` or ``pk`` list."""

    name: str
    type: str = ""
    value: Any = None


class Message(msgspec.Struct, gc=False):
    """A wal2json format-version 2 message; fields this decoder does not use are skipped."""

    action: str
    xid: int | None = None
    nextlsn: str | None = None
    timestamp: str | None = None
    schema: str | None = None
    table: str | None = None
    columns: list[Column] | None = None
    identity: list[Column] | None = None
    pk: list[Column] | None = None


# Typed decoding straight into the structs above (no intermediate dicts). Numeric values arrive
# unquoted: with float_hook=str a number with a fraction or exponent keeps its exact text.
_decode = msgspec.json.Decoder(Message, float_hook=str).decode
parse_message = msgspec.json.Decoder(float_hook=str).decode
"""A generic parse of one message (dicts and lists), with the same number handling."""


def _parse(payload: bytes | memoryview | str) -> Message:
    """One message, or FatalSourceError naming what is wrong with it."""
    try:
        return _decode(payload)
    except msgspec.DecodeError as exc:
        text = bytes(payload[:200]) if not isinstance(payload, str) else payload[:200]
        raise FatalSourceError(f"unreadable wal2json message ({exc}): {text!r}",
                               fix="check that the slot uses wal2json format-version 2") from exc

# The XLogData header carries each change's LSN; include-lsn adds ``nextlsn`` to BEGIN: the end
# of the transaction's commit record, so a BEGIN event carries its transaction's commit order
# (replica outputs guard rows by it without holding a transaction until its COMMIT).
WAL2JSON_OPTIONS: dict[str, str] = {
    "include-lsn": "1",
    "format-version": "2",
    "include-xids": "1",
    "include-timestamp": "1",
    "include-types": "1",
    "include-pk": "1",
    "include-transaction": "1",
}

_ROW_ACTIONS = {"I": Op.INSERT, "U": Op.UPDATE, "D": Op.DELETE}


def log_converter(type_name: str) -> Converter | None:
    """The converter for a value as wal2json's JSON gives it: integers, booleans and strings
    arrive in canonical form already (None: nothing to convert); numerics and floats (parsed as
    strings) do not."""
    name = base_type(type_name)
    if name in FLOAT_TYPES or name == "numeric":
        return converter_for(type_name)
    return None


_UNSEEN: Any = object()


class _TableMeta:
    __slots__ = ("columns", "key_columns", "key_of", "reread_for", "table", "types",
                 "watermark")

    def __init__(self, table: TableId, watermark: bool, key_columns: tuple[str, ...]) -> None:
        self.table = table
        self.watermark = watermark
        self.key_columns = key_columns
        self.key_of = _key_getter(key_columns)
        self.columns: frozenset[str] = frozenset()  # the catalog's columns, for TOAST checks
        self.reread_for: frozenset[str] | None = None
        """The columns of the update that last made the catalog be read again: an update
        of the same columns does not read it again (a backlog, TOAST values left out)."""
        self.types: dict[str, str] = {}
        """Column name to the type its last row was logged under; a new dict when one
        changes, so events share one until then (never changed once handed out)."""


def _key_getter(columns: tuple[str, ...]) -> Callable[[Row], Key]:
    if not columns:
        return lambda row: ()
    if len(columns) == 1:
        name = columns[0]
        return lambda row: (row[name],)
    getter = itemgetter(*columns)
    return lambda row: getter(row)


class Wal2JsonDecoder:
    """Turns one wal2json v2 message into a log item.

    ``columns_of(table, fresh)`` gives a table's column names (``fresh``: bypass caches; None:
    the catalog does not know the table, so its rows are emitted as logged); an update that
    lacks some of them
    carries unchanged TOAST values, which are completed from the old tuple when the table has
    REPLICA IDENTITY FULL and otherwise listed in ``ChangeEvent.unchanged``.
    """

    def __init__(
        self,
        instance: str,
        watermark_table: TableId,
        columns_of: Callable[[TableId, bool], tuple[str, ...] | None],
        key_columns: Mapping[TableId, tuple[str, ...]] | None = None,
        toast_shape_of: Callable[[TableId, bool], ToastShape | None] | None = None,
    ) -> None:
        self.instance = instance
        self.watermark_table = watermark_table
        self.columns_of = columns_of
        self.toast_shape_of = toast_shape_of
        self.key_columns = dict(key_columns or {})
        self._tables: dict[tuple[str, str], _TableMeta] = {}
        self._converters: dict[str, Converter | None] = {}

    def _row(self, columns: Sequence[Column]) -> Row:
        """Values as JSON gave them; numerics and floats converted (looked up by each column's
        own type, so DDL that renames, retypes or reorders columns is followed at once)."""
        converters = self._converters
        row: Row = {}
        for column in columns:
            value = column.value
            if value is not None:
                convert = converters.get(column.type, _UNSEEN)
                if convert is _UNSEEN:
                    convert = converters[column.type] = log_converter(column.type)
                if convert is not None:
                    value = convert(value)
            row[column.name] = value
        return row

    def decode(self, payload: bytes | memoryview | str, header_lsn: int) -> LogItem | None:
        return self.decode_message(_parse(payload), header_lsn)

    def decode_batch(self, payloads: Sequence[bytes | str], header_lsns: list[int]
                     ) -> list[LogItem]:
        """Decode messages one by one (one parse of them all as a JSON array is slower: the
        collector keeps scanning the growing list)."""
        items = []
        decode_message = self.decode_message
        try:
            for payload, lsn in zip(payloads, header_lsns, strict=True):
                item = decode_message(_decode(payload), lsn)
                if item is not None:
                    items.append(item)
        except msgspec.DecodeError:
            for payload in payloads:
                _parse(payload)  # raises the error naming the bad message
            raise
        return items

    def decode_message(self, msg: Message, header_lsn: int) -> LogItem | None:
        action = msg.action
        if action in _ROW_ACTIONS:
            return self._row_event(msg, _ROW_ACTIONS[action], header_lsn)
        if action == "B":  # positioned at its commit's end, as its COMMIT will be
            if not msg.nextlsn:  # the replica guard (dblog.replica.guard.POSTGRES) needs it
                raise FatalSourceError(
                    f"wal2json BEGIN of transaction {msg.xid} has no 'nextlsn'",
                    fix="use wal2json 2.x with format-version 2 and include-lsn (dblog sets "
                        "both options; an older plugin build does not support them)")
            return ChangeEvent(Op.BEGIN, None, txid=msg.xid, commit_ts=msg.timestamp,
                               position=Lsn.parse(msg.nextlsn))
        if action == "C":
            # the message header of COMMIT carries the commit record's end: the resume point
            return ChangeEvent(Op.COMMIT, None, txid=msg.xid, commit_ts=msg.timestamp,
                               position=Lsn(header_lsn))
        if action == "T":
            return ChangeEvent(Op.TRUNCATE, self._meta(msg).table, txid=msg.xid,
                               commit_ts=msg.timestamp, position=Lsn(header_lsn))
        if action == "M":
            return None
        raise FatalSourceError(f"unexpected wal2json action {action!r}")

    def _meta(self, msg: Message) -> _TableMeta:
        if msg.schema is None or msg.table is None:
            raise FatalSourceError(f"wal2json {msg.action!r} message without schema or table",
                                   fix="check that the slot uses wal2json format-version 2")
        name = (msg.schema, msg.table)
        meta = self._tables.get(name)
        if meta is None or (not meta.key_columns and msg.pk is not None):
            # (re)learn the key: a TRUNCATE, the first message after a restart, has no "pk"
            table = TableId(*name)
            keys = self.key_columns.get(table) or tuple(c.name for c in msg.pk or ())
            meta = self._tables[name] = _TableMeta(table, table == self.watermark_table, keys)
        return meta

    def _row_event(self, msg: Message, op: Op, header_lsn: int) -> LogItem | None:
        meta = self._meta(msg)
        after = self._row(msg.columns) if msg.columns is not None else None
        if meta.watermark:
            return self._watermark(after, header_lsn, op)
        identity = self._row(msg.identity) if msg.identity is not None else None
        unchanged: tuple[str, ...] = ()
        if op is Op.UPDATE and after is not None and not (
                len(after) == len(meta.columns) and after.keys() >= meta.columns):
            unchanged = self._complete_toast(meta, after, identity)
        old_key = before = None
        if op is Op.DELETE:
            key = _key(meta, identity)
            before, after = identity, None
        else:
            key = _key(meta, after)
            if identity is not None and op is Op.UPDATE:
                old = _key(meta, identity)
                old_key = old if old != key else None
                # an identity of only the key (REPLICA IDENTITY DEFAULT) is no before-image
                if old_key is not None or len(identity) > len(meta.key_columns):
                    before = identity
        return ChangeEvent(op, meta.table, key, before, after, Lsn(header_lsn), msg.xid,
                           msg.timestamp, old_key, unchanged,
                           types=_logged_types(meta, msg.columns or msg.identity or ()))

    def _watermark(self, after: Row | None, header_lsn: int, op: Op) -> Watermark | None:
        if op is Op.DELETE or after is None or after.get("name") != self.instance:
            return None
        return Watermark(str(after.get("value")), Lsn(header_lsn))

    def _complete_toast(self, meta: _TableMeta, after: Row,
                        identity: Row | None) -> tuple[str, ...]:
        """Columns of the table the update did not carry (unchanged TOAST values): completed
        from the old tuple under REPLICA IDENTITY FULL, otherwise returned as unchanged.

        The columns are today's; the update may have been logged before a column was added
        (a backlog, or a log read behind the ALTER). A column that cannot hold a TOAST value,
        or one missing from a REPLICA IDENTITY FULL old tuple too, did not exist yet: it is
        left out, not reported unchanged (:class:`~.catalog.ToastShape`). A table the catalog
        does not know (dropped or renamed since; ``columns_of`` gives None) has nothing to
        compare with: its row is emitted as logged, no column reported unchanged."""
        names, fresh = self._catalog_columns(meta, after)
        meta.columns = frozenset(names or ())
        if names is None:
            return ()
        shape = None if self.toast_shape_of is None else self.toast_shape_of(meta.table, fresh)
        full_old_row = shape is not None and shape.full_identity and identity is not None
        still: list[str] = []
        for column in names:
            if column in after:
                continue
            if identity is not None and column in identity:
                after[column] = identity[column]
            elif shape is None or (not full_old_row and column in shape.toastable):
                still.append(column)
        return tuple(still)

    def _catalog_columns(self, meta: _TableMeta, after: Row
                         ) -> tuple[tuple[str, ...] | None, bool]:
        """The table's columns, read again (``True``) when the update shows a column set that
        does not fit the cached ones and that has not made them be read already."""
        names = self.columns_of(meta.table, False)
        columns = frozenset(names or ())
        if (not after.keys() <= columns or len(after) < len(meta.columns)) and \
                meta.reread_for != after.keys():
            meta.reread_for = frozenset(after)  # the table changed: DDL
            return self.columns_of(meta.table, True), True
        return names, False


def _logged_types(meta: _TableMeta, columns: Sequence[Column]) -> Mapping[str, str]:
    """The types the row was logged under (wal2json's include-types: the type of the catalog
    at the change, ``format_type`` with typmod), as one mapping per table until one changes
    (``ALTER COLUMN ... TYPE``, which PostgreSQL does not log): formats map values by them."""
    types = meta.types
    for column in columns:
        if types.get(column.name) != column.type:
            meta.types = types = {**types, **{c.name: c.type for c in columns}}
            break
    return types


def _key(meta: _TableMeta, image: Row | None) -> Key | None:
    if image is None or not meta.key_columns:
        return None
    try:
        return meta.key_of(image)
    except KeyError:
        return None

