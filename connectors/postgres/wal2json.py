"""Decoding of wal2json format-version 2 messages into dblog log items (no I/O here)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dblog.errors import FatalSourceError
from dblog.model import ChangeEvent, Key, LogItem, Op, Row, TableId, Watermark
from dblog.positions import Lsn

from .types import converter_for

# numeric values arrive unquoted; parse them as strings so no precision is lost
_decode = json.JSONDecoder(parse_float=str).decode

WAL2JSON_OPTIONS: dict[str, str] = {
    "format-version": "2",
    "include-xids": "1",
    "include-timestamp": "1",
    "include-lsn": "1",
    "include-types": "1",
    "include-pk": "1",
    "include-transaction": "1",
}

_ROW_ACTIONS = {"I": Op.INSERT, "U": Op.UPDATE, "D": Op.DELETE}


def _row(columns: Sequence[Mapping[str, Any]]) -> Row:
    return {c["name"]: converter_for(c["type"])(c["value"]) for c in columns}


class Wal2JsonDecoder:
    """Turns one wal2json v2 message into a log item.

    ``columns_of(table, fresh)`` gives a table's column names (``fresh``: bypass caches); an
    update that lacks some of them
    carries unchanged TOAST values, which are completed from the old tuple when the table has
    REPLICA IDENTITY FULL and otherwise listed in ``ChangeEvent.unchanged``.
    """

    def __init__(
        self,
        instance: str,
        watermark_table: TableId,
        columns_of: Callable[[TableId, bool], tuple[str, ...]],
        key_columns: Mapping[TableId, tuple[str, ...]] | None = None,
    ) -> None:
        self.instance = instance
        self.watermark_table = watermark_table
        self.columns_of = columns_of
        self.key_columns = dict(key_columns or {})
        self._tables: dict[tuple[str, str], TableId] = {}

    def decode(self, payload: bytes | memoryview, header_lsn: int) -> LogItem | None:
        msg = _decode(bytes(payload).decode("utf-8"))
        action = msg["action"]
        if action in _ROW_ACTIONS:
            return self._row_event(msg, _ROW_ACTIONS[action])
        if action == "B":
            return ChangeEvent(Op.BEGIN, None, txid=msg.get("xid"), commit_ts=msg.get("timestamp"),
                               position=Lsn(header_lsn))
        if action == "C":
            # the message header of COMMIT carries the commit record's end: the resume point
            return ChangeEvent(Op.COMMIT, None, txid=msg.get("xid"),
                               commit_ts=msg.get("timestamp"), position=Lsn(header_lsn))
        if action == "T":
            return ChangeEvent(Op.TRUNCATE, self._table(msg), txid=msg.get("xid"),
                               commit_ts=msg.get("timestamp"), position=_lsn(msg, header_lsn))
        if action == "M":
            return None
        raise FatalSourceError(f"unexpected wal2json action {action!r}")

    def _table(self, msg: Mapping[str, Any]) -> TableId:
        name = (msg["schema"], msg["table"])
        table = self._tables.get(name)
        if table is None:
            table = self._tables[name] = TableId(*name)
        return table

    def _row_event(self, msg: Mapping[str, Any], op: Op) -> LogItem | None:
        table = self._table(msg)
        after = _row(msg["columns"]) if "columns" in msg else None
        identity = _row(msg["identity"]) if "identity" in msg else None
        if table == self.watermark_table:
            return self._watermark(after, header=msg, op=op)
        key_cols = self._key_columns(table, msg)
        unchanged: tuple[str, ...] = ()
        if op is Op.UPDATE and after is not None:
            unchanged = self._complete_toast(table, after, identity)
        image = identity if op is Op.DELETE else after
        key = _key(image, key_cols)
        old_key = None
        if op is Op.UPDATE and identity is not None:
            old = _key(identity, key_cols)
            old_key = old if old != key else None
        before = identity if op is not Op.INSERT else None
        return ChangeEvent(op, table, key, before=before,
                           after=after if op is not Op.DELETE else None,
                           position=_lsn(msg, 0), txid=msg.get("xid"),
                           commit_ts=msg.get("timestamp"), old_key=old_key, unchanged=unchanged)

    def _watermark(self, after: Row | None, header: Mapping[str, Any], op: Op) -> Watermark | None:
        if op is Op.DELETE or after is None or after.get("name") != self.instance:
            return None
        return Watermark(str(after.get("value")), _lsn(header, 0))

    def _key_columns(self, table: TableId, msg: Mapping[str, Any]) -> tuple[str, ...]:
        override = self.key_columns.get(table)
        if override:
            return override
        return tuple(c["name"] for c in msg.get("pk", ()))

    def _complete_toast(self, table: TableId, after: Row, identity: Row | None) -> tuple[str, ...]:
        columns = self.columns_of(table, False)
        if len(after) >= len(columns):
            return ()
        missing = [c for c in columns if c not in after]
        if missing:  # the table may have lost a column since we cached it
            missing = [c for c in self.columns_of(table, True) if c not in after]
        still: list[str] = []
        for column in missing:
            if identity is not None and column in identity:
                after[column] = identity[column]
            else:
                still.append(column)
        return tuple(still)


def _key(image: Row | None, key_cols: Sequence[str]) -> Key | None:
    if image is None or not key_cols:
        return None
    try:
        return tuple(image[c] for c in key_cols)
    except KeyError:
        return None


def _lsn(msg: Mapping[str, Any], fallback: int) -> Lsn:
    text = msg.get("lsn")
    return Lsn.parse(text) if text else Lsn(fallback)
