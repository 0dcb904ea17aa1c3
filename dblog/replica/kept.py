"""Kept columns filled from the stored rows, as every writer of a table plan does it.

A :class:`~dblog.replica.reduce.RowChange` with ``keep`` lacks columns the source did not
send (PostgreSQL unchanged TOAST values); a writer takes them from the row stored, before the
table plan, under ``keep_from`` (or the change's own key). :func:`with_kept` is that rule
over any target: the writer only reads its stored rows.

When the replica holds no values to keep (no stored row under the key, or a tombstone), the
change is **left out**, with one warning per table plan naming the keys and their repair (a
keyed dump). Why that is sound, where refusing was not:

* the row exists in the source (it was just updated), but the replica never held it: a dump
  has not reached it yet (a replica fed from a running dump), or the stream started after the
  row was written. A dump that reaches the key later selects the whole row and writes it with
  its high watermark's guard, after this change: leaving the change out loses nothing. Where
  no dump will (the key was in a chunk whose window this very change closed: step 6 of the
  algorithm drops it from the chunk), the replica lacks the row whether or not this change is
  written, since a partial row cannot be completed; the warning names the keyed dump that
  brings it. Refusing instead stopped the output for good: the replay refused again and the
  dump row that would repair it queued behind;
* a tombstone holds no values either. It no longer proves a lost change: a key change away
  from a key whose own earlier partial change was left out leaves that key a tombstone while
  the source has the row again once a later change moves it back. Left out and named, like
  a missing row, for the same reasons.

A left-out change writes nothing, so its key keeps what it had (nothing, or the tombstone
with its older guard): a later full change or dump row of the key is still accepted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TypeAlias

import orjson

from dblog.core.model import Key, Row

from .guard import Guard
from .reduce import RowChange

Changes: TypeAlias = list[tuple[RowChange, Row | None]]
"""A table plan's changes with their decoded rows (None: a tombstone)."""
Stored: TypeAlias = Mapping[Key, tuple[Guard, Row | None]]
"""Stored rows by key: guard and values, or None for a tombstone."""
SHOWN_KEYS = 20
"""How many keys one warning lists (the count says how many there were)."""

log = logging.getLogger("dblog.replica")


class LeftOut:
    """The changes of one replica table left out because the replica does not hold their
    kept values: ``count`` in all (across flushes), one warning per :meth:`note` call."""

    def __init__(self, table: str, where: str | None = None) -> None:
        self.table, self.where = table, where or table
        self.count = 0

    def note(self, changes: list[RowChange]) -> None:
        """Count ``changes`` and log one WARNING naming their keys and the repair."""
        self.count += len(changes)
        keys = sorted({c.key for c in changes}, key=repr)
        log.warning("%s: %d change(s) left out, they keep unchanged (TOAST) columns %s of "
                    "rows the replica does not hold, keys %s%s; %s", self.where, len(changes),
                    sorted(set().union(*(c.keep for c in changes))), keys[:SHOWN_KEYS],
                    f" and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else "",
                    repair(self.table, keys))


def repair(table: str, keys: list[Key]) -> str:
    """The keyed dump that brings ``keys``' whole rows (docs/api.md, ``dblog dump``)."""
    listed = orjson.dumps([list(k) for k in keys], default=str).decode()
    return (f"a dump still to reach them brings the whole rows; if none will, dump the keys: "
            f"dblog dump -c <config> --table {table} --keys '{listed}' (or POST "
            f"/api/v1/dumps {{\"table\": \"{table}\", \"keys\": {listed}}})")


def kept_sources(changes: Changes) -> set[Key]:
    """The keys whose stored rows :func:`with_kept` reads: each keeping change's own key and
    its ``keep_from``."""
    wanted = {c.key for c, _ in changes if c.keep}
    wanted |= {c.keep_from for c, _ in changes if c.keep and c.keep_from is not None}
    return wanted


def with_kept(changes: Changes, read: Callable[[set[Key]], Stored],
              left_out: LeftOut) -> Changes:
    """``changes`` with their kept columns filled from ``read(kept_sources(changes))``.

    Guarantees: a change without ``keep`` (or a tombstone) is passed as it is; a keeping
    change whose own stored row has an equal or greater guard is left out (the guarded
    write would refuse it anyway, and its source row may be gone); a keeping change whose
    source row (``keep_from``, else its own key) is missing or a tombstone is left out and
    noted in ``left_out`` (see the module docstring); any other keeping change gets exactly
    its ``keep`` columns from the source row. The order is kept. ``read`` is called once,
    and not at all when no change keeps a column.
    """
    if not any(change.keep for change, _ in changes):
        return changes
    stored = read(kept_sources(changes))
    out: Changes = []
    unheld: list[RowChange] = []
    for change, row in changes:
        if not change.keep or row is None:
            out.append((change, row))
            continue
        own = stored.get(change.key)
        if own is not None and own[0] >= change.guard:
            continue
        source = stored.get(change.key if change.keep_from is None else change.keep_from)
        if source is None or source[1] is None:
            unheld.append(change)
            continue
        out.append((change, {**row, **{c: source[1].get(c) for c in change.keep}}))
    if unheld:
        left_out.note(unheld)
    return out
