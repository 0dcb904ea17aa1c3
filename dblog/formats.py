"""Wire formats of events. The native form is the reference; see docs/formats.md."""

from __future__ import annotations

from typing import Any

from dblog.model import ChangeEvent

_last_position: list[Any] = [None, ""]


def native(event: ChangeEvent) -> dict[str, Any]:
    """The native JSON form: every field of the event, ``None`` fields left out."""
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
    if event.after is not None:
        out["after"] = event.after
    if event.unchanged:
        out["unchanged"] = event.unchanged
    position = event.position
    if position is not None:
        # the rows of a chunk share one position object: format it once
        if position is not _last_position[0]:
            _last_position[:] = [position, str(position)]
        out["pos"] = _last_position[1]
    if event.txid is not None:
        out["txid"] = event.txid
    if event.commit_ts is not None:
        out["ts"] = event.commit_ts
    if event.dump_id is not None:
        out["dump_id"] = event.dump_id
    return out
