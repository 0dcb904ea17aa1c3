"""Unit tests of :func:`dblog.replica.kept.with_kept`: kept (unchanged TOAST) columns filled
from the stored rows, as every replica writer does it."""

from __future__ import annotations

import pytest

from dblog.core.model import Key, Row
from dblog.replica import Guard, RowChange
from dblog.replica.kept import Changes, LeftOut, Stored, kept_sources, with_kept

G = Guard(10, 1)


def change(key: int, row: Row | None, keep: tuple[str, ...] = (), keep_from: int | None = None,
           guard: Guard = G) -> tuple[RowChange, Row | None]:
    return (RowChange((key,), guard, row, frozenset(keep),
                      None if keep_from is None else (keep_from,), seq=key), row)


class Reader:
    def __init__(self, stored: Stored) -> None:
        self.stored, self.asked = stored, list[set[Key]]()

    def __call__(self, keys: set[Key]) -> Stored:
        self.asked.append(keys)
        return {k: v for k, v in self.stored.items() if k in keys}


def test_changes_that_keep_nothing_pass_and_nothing_is_read() -> None:
    changes: Changes = [change(1, {"id": 1, "v": 1}), change(2, None)]
    read = Reader({})
    assert with_kept(changes, read, LeftOut("t")) == changes
    assert read.asked == []


def test_kept_columns_come_from_the_own_or_the_keep_from_row() -> None:
    read = Reader({(1,): (Guard(5, 1), {"id": 1, "v": 0, "blob": "a", "x": 1}),
                   (7,): (Guard(5, 1), {"id": 7, "v": 0, "blob": "b", "x": 2})})
    changes: Changes = [change(1, {"id": 1, "v": 1}, keep=("blob",)),
                        change(3, None),
                        change(2, {"id": 2, "v": 2}, keep=("blob", "x"), keep_from=7)]
    assert kept_sources(changes) == {(1,), (2,), (7,)}
    out = with_kept(changes, read, LeftOut("t"))
    assert [row for _, row in out] == [{"id": 1, "v": 1, "blob": "a"}, None,
                                       {"id": 2, "v": 2, "blob": "b", "x": 2}]
    assert [c for c, _ in out] == [c for c, _ in changes]
    assert read.asked == [{(1,), (2,), (7,)}]


def test_a_change_the_stored_guard_refuses_is_left_out() -> None:
    """Its own row is as new or newer: the guarded write would skip it (its source row may
    be gone, so it must not be refused either)."""
    read = Reader({(1,): (G, {"id": 1, "v": 9, "blob": "new"})})
    changes: Changes = [change(1, {"id": 1, "v": 1}, keep=("blob",), keep_from=5),
                        change(2, {"id": 2, "v": 2})]
    assert with_kept(changes, read, LeftOut("t")) == [changes[1]]


@pytest.mark.parametrize("stored", [{}, {(5,): (Guard(1, 1), None)}])
def test_a_missing_or_deleted_source_row_leaves_the_change_out(stored: Stored) -> None:
    """Not refused (a dump still to reach the key brings the whole row): left out, counted."""
    changes: Changes = [change(2, {"id": 2}, keep=("blob",), keep_from=5), change(3, None)]
    left_out = LeftOut("s.t")
    assert with_kept(changes, Reader(stored), left_out) == [changes[1]]
    assert left_out.count == 1
