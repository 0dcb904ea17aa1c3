"""The watermark window: steps 6 and 7 of the algorithm, as pure functions on values.

A window holds the rows of one chunk, selected between the low watermark L and the high
watermark H. Between seeing L and seeing H in the log, every change to the chunk's table removes
the rows whose key it touches (both keys for a key-changing update); a truncate or schema change
discards the whole chunk. When H is seen the surviving rows are emitted, before any later event.

Why dropping is safe: a log event between L and H for key k is emitted to outputs anyway, and it
is at least as new as the chunk's row for k could be (the row was read after L committed and
before H, so either the event is newer, or it was already visible to the SELECT and carries the
same or a newer version). Emitting the chunk row after it could go back in time (I2); dropping it
loses nothing because the event itself carries the row. Rows the log did not touch cannot have
changed between the SELECT and H, so emitting them at H is correct.

A transaction whose commit precedes L in the log but that the SELECT's snapshot did not see
(PostgreSQL makes a commit visible a moment after logging it) is treated like one inside the
window: its events evict rows too (``pending_txids``).

An event whose after-image is incomplete (PostgreSQL unchanged TOAST columns) cannot stand in
for the row it evicts, so its key is listed in ``refetch``: the engine reads those keys again in
a later window. That holds for its new key when it evicted the row under its old one (a key
change): the new key may lie outside the chunk, and no later chunk may reach it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from dblog.core.model import ROW_OPS, TABLE_OPS, ChangeEvent, Key, Op, RowImage, TableId


@dataclass(frozen=True, slots=True)
class ChunkWindow:
    table: TableId
    low: str
    high: str
    rows: Mapping[Key, RowImage]
    last_key: Key | None
    low_seen: bool = False
    discarded: bool = False
    discard_reason: str | None = None
    """Why the chunk is read again (said in the log and counted in the metrics)."""
    dropped: int = 0
    refetch: frozenset[Key] = field(default_factory=frozenset)
    pending_txids: frozenset[int] = field(default_factory=frozenset)


def open_window(
    table: TableId, low: str, high: str, rows: Sequence[tuple[Key, RowImage]],
    pending_txids: frozenset[int] = frozenset(),
) -> ChunkWindow:
    """A window over the rows a chunk SELECT returned (in key order). ``pending_txids`` are
    transactions the SELECT could not see; their events evict rows even before L is seen."""
    last_key = rows[-1][0] if rows else None
    return ChunkWindow(table=table, low=low, high=high, rows=dict(rows), last_key=last_key,
                       pending_txids=pending_txids)


def evict(window: ChunkWindow, keys: Iterable[Key]) -> ChunkWindow:
    """Drop rows for keys that already-forwarded transactions changed (the SELECT could not see
    them): the forwarded events carry those rows, newer than the chunk's."""
    present = [k for k in keys if k in window.rows]
    if not present:
        return window
    rows = {k: r for k, r in window.rows.items() if k not in set(present)}
    return replace(window, rows=rows, dropped=window.dropped + len(present))


UNSEEN = ("a transaction invisible to the chunk's SELECT was logged but not seen by this run "
          "(forwarded before a restart)")
TRUNCATED = "the table was truncated inside the window"
SCHEMA_CHANGED = "the table's schema changed around the window"


def discard(window: ChunkWindow, reason: str) -> ChunkWindow:
    """Give up the chunk (for ``reason``); it is read again in a later window."""
    return replace(window, rows={}, discarded=True, discard_reason=reason,
                   dropped=window.dropped + len(window.rows))


def guard_forwarded(
    window: ChunkWindow,
    keys_of: Callable[[int], set[tuple[str, str, Key, bool]] | str | None],
    logged_txids: frozenset[int] | None = None,
    why_unknown: Callable[[int], str] = lambda txid: "cannot be described by the index",
) -> ChunkWindow:
    """Drop rows that in-progress-but-already-forwarded transactions touched (``keys_of`` from
    :class:`dblog.core.recent.RecentTransactions`); a partial forwarded image puts its key up for a
    re-read; a transaction the index cannot describe, or one whose commit is logged but that
    the index never saw (forwarded before a restart), discards the chunk."""
    schema, name = window.table.schema, window.table.name
    for txid in window.pending_txids:
        keys = keys_of(txid)
        if isinstance(keys, str):
            return discard(window, "a transaction invisible to the chunk's SELECT "
                           f"{why_unknown(txid)}")
        if keys is None and logged_txids is not None and txid in logged_txids:
            return discard(window, UNSEEN)  # maybe forwarded before a restart: cannot tell
        if not keys:
            continue
        mine = [(k, partial) for s, n, k, partial in keys if s == schema and n == name]
        if not any(k in window.rows for k, _ in mine):
            continue
        # the index does not pair a key change's keys: every partial key of a transaction
        # that evicted a row is read again (one more than needed at worst)
        refetch = frozenset(k for k, partial in mine if partial)
        window = evict(window, [k for k, _ in mine])
        if refetch:
            window = replace(window, refetch=window.refetch | refetch)
    return window


def on_watermark(window: ChunkWindow, value: str) -> tuple[ChunkWindow, bool]:
    """Observe a watermark value; return the window and whether it is now closed (H seen)."""
    if value == window.low:
        return replace(window, low_seen=True), False
    if value == window.high and window.low_seen:
        return window, True
    return window, False


def on_change(window: ChunkWindow, event: ChangeEvent) -> ChunkWindow:
    """Apply the drop rule for one log event."""
    if event.table != window.table or window.discarded:
        return window
    if event.op is Op.SCHEMA:
        # even before L: a chunk SELECT that ran after the DDL may still have used the columns
        # the reader knew before it (the DDL reaches the log reader later); read it again
        return discard(window, SCHEMA_CHANGED)
    if not window.low_seen and event.txid not in window.pending_txids:
        return window
    if event.op in TABLE_OPS:
        return discard(window, TRUNCATED if event.op is Op.TRUNCATE else SCHEMA_CHANGED)
    if event.op not in ROW_OPS:
        return window
    touched = [k for k in (event.key, event.old_key) if k is not None and k in window.rows]
    if not touched:
        return window
    rows = dict(window.rows)
    for key in touched:
        del rows[key]
    refetch = window.refetch
    if event.unchanged and event.key is not None:  # under its new key too: a key change
        refetch = refetch | {event.key}
    return replace(window, rows=rows, dropped=window.dropped + len(touched), refetch=refetch)


def surviving_rows(window: ChunkWindow) -> list[tuple[Key, RowImage]]:
    """The rows to emit as ``read`` events when H is seen, in key order."""
    return list(window.rows.items())
