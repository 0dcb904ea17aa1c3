"""Dump progress as the API shows it: rows, chunks, current table, last key, estimated total,
rate and ETA, from the dumps in ``Control.status()``.

The state holds counts only, so the rate is measured here: each time a dump is looked at, its
row count is sampled, and the rate is the change over the last minute of samples (the server
also samples every second in the background while a dump runs, so the ETA is there on the
first look too).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from dblog.api.models import DumpView, TableView

WINDOW_S = 60.0
MIN_SPAN_S = 1.0


class RateTracker:
    """Rows per second of each dump over a sliding window (thread-safe)."""

    def __init__(self) -> None:
        self._samples: dict[str, deque[tuple[float, int]]] = {}
        self._lock = threading.Lock()

    def observe(self, dump_id: str, rows: int, running: bool) -> float | None:
        now = time.monotonic()
        with self._lock:
            if not running:
                self._samples.pop(dump_id, None)
                return None
            samples = self._samples.setdefault(dump_id, deque())
            if not samples or now - samples[-1][0] >= 0.2:
                samples.append((now, rows))
            while len(samples) > 2 and now - samples[0][0] > WINDOW_S:
                samples.popleft()
            (t0, r0), (t1, r1) = samples[0], samples[-1]
        if t1 - t0 < MIN_SPAN_S:
            return None
        return max(0.0, (r1 - r0) / (t1 - t0))


def _name(raw: Any) -> str:
    return raw if isinstance(raw, str) else f"{raw[0]}.{raw[1]}"


def dump_view(raw: dict[str, Any], rates: RateTracker) -> DumpView:
    tables = [TableView(table=_name(t["table"]), done=t["done"], rows=t["rows"],
                        chunks=t["chunks"], estimated_rows=max(0, t["estimated_rows"]),
                        last_key=t["last_key"]) for t in raw["tables"]]
    keys = raw.get("keys")
    rows = sum(t.rows for t in tables)
    if keys is not None:
        total = len(keys)
        current = tables[0] if tables and raw["state"] in ("queued", "running") else None
    else:
        total = sum(t.estimated_rows for t in tables)
        current = next((t for t in tables if not t.done and (t.rows or t.estimated_rows)),
                       None) if raw["state"] == "running" else None
    rate = rates.observe(raw["id"], rows, raw["state"] == "running")
    done = raw["state"] == "done"
    percent = 100.0 if done else (min(99.9, 100.0 * rows / total) if total else None)
    eta = None
    if rate and total and not done:
        eta = max(0.0, (total - rows) / rate)
    return DumpView(
        id=raw["id"], state=raw["state"], kind=_kind(raw), key_range=raw.get("range"),
        error=raw.get("error"), rows=rows, chunks=sum(t.chunks for t in tables),
        estimated_total=total, percent=percent,
        current_table=None if current is None else current.table,
        last_key=None if current is None else current.last_key,
        rows_per_s=rate, eta_s=eta, tables=tables)


def _kind(raw: dict[str, Any]) -> str:
    if raw.get("keys") is not None:
        return "keys"
    return "range" if raw.get("range") is not None else "tables"


def table_states(status: dict[str, Any]) -> dict[str, str]:
    """Each known table's state: ``dumping`` (the running dump reads it now), ``failing``
    (the last dump that covered it failed, or the capture is down), else ``streaming``."""
    base = "streaming" if status.get("running") else "stopped"
    states = {str(name): base for name in status.get("tables") or []}
    for dump in status.get("dumps", []):  # oldest first: later dumps override
        for table in dump["tables"]:
            name = _name(table["table"])
            if dump["state"] == "failed":
                states[name] = "failing"
            elif dump["state"] == "running" and table.get("started") and not table["done"]:
                states[name] = "dumping"
            else:
                states[name] = base
    return states
