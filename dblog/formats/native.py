"""The native JSON format: every field of the event, ``None`` fields left out (the reference
form; see docs/formats.md). :func:`native_document` builds it as a dict; :class:`NativeFormat`
encodes the same documents to bytes faster, with caches private to each instance."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice
from typing import Any

import msgspec
import orjson

from dblog.core.model import ChangeEvent, EncodedRow, Op, TableId, TableInfo
from dblog.formats.base import Record, TableLookup, no_tables


def native_document(event: ChangeEvent, decoded: bool = False) -> dict[str, Any]:
    """The native form as a dict. A pre-encoded after-image is embedded as an orjson fragment
    unless ``decoded`` asks for plain values."""
    out: dict[str, Any] = {"seq": event.seq, "op": event.op.value}
    if event.table is not None:
        out["schema"] = event.table.schema
        out["table"] = event.table.name
    if event.key is not None:
        out["key"] = event.key
    if event.old_key is not None:
        out["old_key"] = event.old_key
    if event.before is not None:
        out["before"] = event.before
    after = event.after
    if after is not None:
        if isinstance(after, EncodedRow):
            out["after"] = after.decode() if decoded else orjson.Fragment(after.json)
        else:
            out["after"] = after
    if event.unchanged:
        out["unchanged"] = event.unchanged
    if event.position is not None:
        out["pos"] = str(event.position)
    if event.txid is not None:
        out["txid"] = event.txid
    if event.commit_ts is not None:
        out["ts"] = event.commit_ts
    if event.dump_id is not None:
        out["dump_id"] = event.dump_id
    return out


class NativeFormat:
    """Encodes native documents. Two shapes that make up most of a stream take shortcuts that
    give the same document: a log row event (key, a plain after-image and maybe a plain
    before-image, position, transaction id and time) is formatted directly, and consecutive
    dump rows are encoded in one msgspec call with a pre-encoded row embedded as is."""

    name = "native"

    def __init__(self) -> None:
        self._heads: dict[tuple[Op, TableId], bytes] = {}
        self._ts: tuple[Any, bytes] = (None, b"")
        self._read_pos: tuple[Any, str | None] = (None, None)
        self._encoder = msgspec.json.Encoder()

    def encode(self, event: ChangeEvent, table: TableInfo | None = None) -> bytes:
        return self.line(event)[:-1]

    def encode_records(self, event: ChangeEvent, table: TableInfo | None = None
                       ) -> list[Record]:
        """One record per event, keyed by the key values as a JSON array (none for events
        without a key)."""
        key = None if event.key is None else orjson.dumps(event.key)
        return [Record(key, self.line(event)[:-1])]

    def line(self, event: ChangeEvent) -> bytes:
        """``orjson.dumps(native_document(event))`` plus a newline, byte for byte."""
        after, position, ts, table = event.after, event.position, event.commit_ts, event.table
        before = event.before
        if (type(after) is not dict or table is None or ts is None or event.txid is None
                or event.key is None or position is None
                or (before is not None and type(before) is not dict)
                or event.old_key is not None or event.unchanged or event.dump_id is not None):
            return orjson.dumps(native_document(event), option=orjson.OPT_APPEND_NEWLINE)
        cached = self._ts
        if ts is not cached[0]:  # one per transaction
            cached = self._ts = (ts, orjson.dumps(ts))
        head = self._heads.get((event.op, table)) or self._head(event.op, table)
        dumps = orjson.dumps
        if before is not None:  # an update with its before-image
            return b'{"seq":%d,%b,"key":%b,"before":%b,"after":%b,"pos":%b,"txid":%d,"ts":%b}\n' % (
                event.seq, head, dumps(event.key), dumps(before), dumps(after),
                dumps(str(position)), event.txid, cached[1])
        return b'{"seq":%d,%b,"key":%b,"after":%b,"pos":%b,"txid":%d,"ts":%b}\n' % (
            event.seq, head, dumps(event.key), dumps(after), dumps(str(position)), event.txid,
            cached[1])

    def _head(self, op: Op, table: TableId) -> bytes:
        head = self._heads.get((op, table))
        if head is None:
            encoded = orjson.dumps({"op": op.value, "schema": table.schema, "table": table.name})
            head = self._heads[(op, table)] = encoded[1:-1]
        return head

    def encode_lines(self, events: Sequence[ChangeEvent], tables: TableLookup = no_tables
                     ) -> bytes:
        lines: list[bytes] = []
        append, line, read, run_end = lines.append, self.line, Op.READ, 0
        for index, e in enumerate(events):
            if index < run_end:
                continue  # encoded with its run
            if e.op is read:
                run_end = self._read_run(events, index, lines)
                if run_end > index:
                    continue
            append(line(e))
        return b"".join(lines)

    def _read_run(self, events: Sequence[ChangeEvent], start: int, lines: list[bytes]) -> int:
        """Appends the lines of the dump rows from ``events[start]`` on that share a table, a
        position, a dump id and the type of their after-image (a chunk's rows), encoded in one
        msgspec call; returns the index after them (``start``: the event there has another
        shape)."""
        first = events[start]
        table, position, dump_id, row_type = (first.table, first.position, first.dump_id,
                                              type(first.after))
        if table is None or first.op is not Op.READ or row_type not in _ROW_TYPES:
            return start
        end, read = start, Op.READ
        for e in islice(events, start, None):
            if e.op is not read or e.table is not table or e.position is not position \
                    or e.dump_id != dump_id or type(e.after) is not row_type or e.key is None \
                    or e.txid is not None or e.before is not None or e.old_key is not None \
                    or e.unchanged or e.commit_ts is not None:
                break
            end += 1
        if end == start:
            return start
        pos = None if position is None else str(position)
        schema, name, run = table.schema, table.name, islice(events, start, end)
        if row_type is EncodedRow:
            reads = [_ReadLine(e.seq, "read", schema, name, e.key,
                               msgspec.Raw(e.after.json), pos, dump_id)  # type: ignore[union-attr]
                     for e in run]
        else:
            reads = [_ReadLine(e.seq, "read", schema, name, e.key, e.after, pos, dump_id)
                     for e in run]
        lines.append(self._encoder.encode_lines(reads))
        return end


class _ReadLine(msgspec.Struct, omit_defaults=True, gc=False):
    """A dump row's native document, fields in the native order (``after`` a row dict or
    ``msgspec.Raw`` of a row the source encoded)."""

    seq: int
    op: str
    schema: str
    table: str
    key: Any
    after: Any
    pos: str | None = None
    dump_id: str | None = None


_ROW_TYPES = (dict, EncodedRow)
