"""Wire formats of events. The native form is the reference; see docs/formats.md."""

from __future__ import annotations

from typing import Any

import orjson

from dblog.model import ChangeEvent, EncodedRow

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
