"""Kept columns filled from the stored rows, as every writer of a table plan does it.

A :class:`~dblog.replica.reduce.RowChange` with ``keep`` lacks columns the source did not
send (PostgreSQL unchanged TOAST values); a writer takes them from the row stored, before the
table plan, under ``keep_from`` (or the change's own key). :func:`with_kept` is that rule
over any target: the writer only reads its stored rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeAlias

from dblog.core.model import Key, Row
from dblog.errors import FatalOutputError

from .guard import Guard
from .reduce import RowChange

Changes: TypeAlias = list[tuple[RowChange, Row | None]]
"""A table plan's changes with their decoded rows (None: a tombstone)."""
Stored: TypeAlias = Mapping[Key, tuple[Guard, Row | None]]
"""Stored rows by key: guard and values, or None for a tombstone."""
DUMP_AGAIN = "dump the table again (a dump row carries every column)"


def kept_sources(changes: Changes) -> set[Key]:
    """The keys whose stored rows :func:`with_kept` reads: each keeping change's own key and
    its ``keep_from``."""
    wanted = {c.key for c, _ in changes if c.keep}
    wanted |= {c.keep_from for c, _ in changes if c.keep and c.keep_from is not None}
    return wanted


def with_kept(changes: Changes, read: Callable[[set[Key]], Stored],
              refuse: Callable[[RowChange, Key], FatalOutputError]) -> Changes:
    """``changes`` with their kept columns filled from ``read(kept_sources(changes))``.

    Guarantees: a change without ``keep`` (or a tombstone) is passed as it is; a keeping
    change whose own stored row has an equal or greater guard is left out (the guarded
    write would refuse it anyway, and its source row may be gone); any other keeping change
    gets exactly its ``keep`` columns from the source row, and when that row is missing or
    a tombstone, ``refuse(change, source_key)`` is raised. The order is kept. ``read`` is
    called once, and not at all when no change keeps a column.
    """
    if not any(change.keep for change, _ in changes):
        return changes
    stored = read(kept_sources(changes))
    out: Changes = []
    for change, row in changes:
        if not change.keep or row is None:
            out.append((change, row))
            continue
        own = stored.get(change.key)
        if own is not None and own[0] >= change.guard:
            continue
        source_key = change.key if change.keep_from is None else change.keep_from
        source = stored.get(source_key)
        if source is None or source[1] is None:
            raise refuse(change, source_key)
        out.append((change, {**row, **{c: source[1].get(c) for c in change.keep}}))
    return out


def missing_in(where: str, holder: str = "the table", with_key: bool = False
               ) -> Callable[[RowChange, Key], FatalOutputError]:
    """The refusal of a change whose kept columns ``holder`` (at ``where``) does not hold."""
    def refuse(change: RowChange, source_key: Key) -> FatalOutputError:
        of_key = f" of key {source_key!r}" if with_key else ""
        return FatalOutputError(f"{where}: the change at seq {change.seq} keeps "
                                f"{sorted(change.keep)}{of_key}, which {holder} does not hold",
                                fix=DUMP_AGAIN)
    return refuse
