"""Apply a stream to a dict (the I3 check)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from dblog.core.model import (
    ChangeEvent,
)
from dblog.formats.native import native_document


def replay(events: Iterable[dict[str, Any] | ChangeEvent],
           key_of: Callable[[dict[str, Any]], Any] | None = None) -> dict[Any, dict[str, Any]]:
    """Apply a stream (native dicts or events) to an empty store: upsert after-images (merging
    columns marked unchanged), delete on delete, clear on truncate. Keys are (table, key)."""
    store: dict[Any, dict[str, Any]] = {}
    for raw in events:
        event = raw if isinstance(raw, dict) else _as_native(raw)
        op, table = event["op"], (event.get("schema"), event.get("table"))
        if op in ("begin", "commit", "schema"):
            continue
        if op == "truncate":
            for k in [k for k in store if k[0] == table]:
                del store[k]
            continue
        key = (table, tuple(event["key"]))
        if event.get("old_key") is not None:
            old = store.pop((table, tuple(event["old_key"])), None)
            if old is not None and event.get("unchanged"):
                store[key] = old
        if op == "delete":
            store.pop(key, None)
            continue
        row = dict(store.get(key, {})) if event.get("unchanged") else {}
        row.update(event["after"])
        store[key] = row
    return store


def _as_native(event: ChangeEvent) -> dict[str, Any]:
    return native_document(event, decoded=True)
