"""Wire formats of events. The native form is the reference; see docs/formats.md."""

from __future__ import annotations

from typing import Any

import orjson

from dblog.model import ChangeEvent, EncodedRow, Op, TableId
from dblog.positions import Lsn

_last_position: tuple[Any, str] = (None, "")


def native(event: ChangeEvent, decoded: bool = False) -> dict[str, Any]:
    """The native JSON form: every field of the event, ``None`` fields left out. A pre-encoded
    after-image is embedded as an orjson fragment unless ``decoded`` asks for plain values."""
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
    position = event.position
    if position is not None:
        global _last_position
        # the rows of a chunk share one position object: format it once (a tuple is replaced
        # whole, so concurrent callers never see a position paired with another's text)
        cached = _last_position
        if position is not cached[0]:
            cached = _last_position = (position, str(position))
        out["pos"] = cached[1]
    if event.txid is not None:
        out["txid"] = event.txid
    if event.commit_ts is not None:
        out["ts"] = event.commit_ts
    if event.dump_id is not None:
        out["dump_id"] = event.dump_id
    return out


_heads: dict[tuple[Op, TableId], bytes] = {}
_last_ts: tuple[Any, bytes] = (None, b"")
_last_head: tuple[Any, Any, bytes] = (None, None, b"")


def _head(op: Op, table: TableId) -> bytes:
    global _last_head
    cached = _last_head
    if op is cached[0] and table is cached[1]:  # decoders share one TableId per table
        return cached[2]
    head = _heads.get((op, table))
    if head is None:
        encoded = orjson.dumps({"op": op.value, "schema": table.schema, "table": table.name})
        head = _heads[(op, table)] = encoded[1:-1]
    _last_head = (op, table, head)
    return head


def native_line(event: ChangeEvent) -> bytes:
    """``orjson.dumps(native(event))`` plus a newline, byte for byte; the common shape of a
    log row event (key, a plain after-image, position, transaction id and time, nothing else)
    is formatted directly, which costs about half."""
    after, position, ts, table = event.after, event.position, event.commit_ts, event.table
    if (type(after) is not dict or table is None or ts is None or event.txid is None
            or event.key is None or type(position) is not Lsn or event.before is not None
            or event.old_key is not None or event.unchanged or event.dump_id is not None):
        return orjson.dumps(native(event), option=orjson.OPT_APPEND_NEWLINE)
    global _last_ts
    cached = _last_ts
    if ts is not cached[0]:  # one per transaction
        cached = _last_ts = (ts, orjson.dumps(ts))
    return b'{"seq":%d,%b,"key":%b,"after":%b,"pos":"%X/%X","txid":%d,"ts":%b}\n' % (
        event.seq, _head(event.op, table), orjson.dumps(event.key), orjson.dumps(after),
        position >> 32, position & 0xFFFFFFFF, event.txid, cached[1])
