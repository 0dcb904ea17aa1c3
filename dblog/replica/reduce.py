"""Reduction of guarded changes to the last change per key, per table (stream order).

* insert, update, read: an upsert of the after-image;
* delete: a tombstone (the key, the guard, no row);
* an update that changes the key: a tombstone for the old key, then an upsert of the new one;
* unchanged TOAST columns (``event.unchanged``): filled from an earlier change of the same row
  in the reduction when there is one, otherwise listed in :attr:`RowChange.keep` (the target
  keeps its stored value; for a key change the stored row is the old key's,
  :attr:`RowChange.keep_from`). Kept values are read from the row stored right before the
  change, which the target holds whichever part of a replayed plan it had applied already:
  the change's own key, or the old key its change moved away from. One case would need an
  older row: a change keeping columns that the previous change of the row (a key change)
  kept from *its* old key; a replay that the target had applied up to between the two has
  tombstoned (or reused) that old key already. There the table's reduction is sealed and a
  second one started, so the table appears twice in the plan and the second change reads
  the row the first one wrote;
* truncate: a barrier: the table's earlier changes in the reduction are dropped (the target
  clears every row with a smaller guard, :attr:`TablePlan.truncate`);
* schema changes are kept in order for the writer (added columns, see docs/replica.md).

Changes at or below the table's barrier (a truncate already applied, kept with the replica)
are older than the truncate that cleared the table and are dropped.

**Key identity.** Two changes are of one key when their keys are equal as the events'
canonical values (Python equality of the key tuples): no normalisation happens here. Why
that is sound, and what it asks of the source and of the target:

1. The source gives each row one key value at a time, and a change of that value arrives
   as a key change (``old_key``). The connectors make it so: a MySQL key is normalised under
   its collation (``'a'`` and ``'A'`` under a ``_ci`` one are one canonical value), and
   PostgreSQL, which compares a key's stored bytes to decide whether an update changed it,
   logs a change of spelling that its own equality ignores (an unconstrained ``numeric``
   going from ``1.5`` to ``1.50``) with the old key. So the events of one source row carry
   one key until a key change names both, and a dump row carries the key as stored then.
   The reduction then keeps per canonical key the last change, a key change being a
   tombstone of the old key and an upsert of the new one, as the naive replay of the stream
   keyed by canonical values does; the guard argument (:mod:`dblog.replica.guard`) holds per
   such key, and the source's live rows are exactly the replay's live keys (a row whose key
   changed spelling is one live key, its old spelling a tombstone).
2. The target must compare key columns as the canonical values compare, neither coarser nor
   finer: were it coarser (a NUMERIC column for ``"1.5"`` and ``"1.50"``, a PAD SPACE or
   ``_ci`` collation for ``'a'`` and ``'a '``), the tombstone and the upsert of one key
   change, which share a guard, would meet in one row and the upsert lose to the tombstone;
   keys the core keeps apart would overwrite each other. The SQL output therefore stores
   text keys under binary NO PAD collations and scale-free decimals as their text
   (``dblog.outputs.sql_kinds.exact_key``); fixed-scale decimals have one spelling per
   value. ``tests/unit/test_replica_numeric_keys.py`` checks both halves on random streams
   of scale-changing numeric keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

from dblog.core.model import ChangeEvent, EncodedRow, Key, Op, Row, RowImage, TableId
from dblog.errors import FatalOutputError

from .guard import Guard


class RowChange(msgspec.Struct, frozen=True, gc=False):
    """The last change of one key in a plan; ``row`` is None for a tombstone.

    A msgspec struct, like :class:`~dblog.core.model.ChangeEvent`: one is built per row of a
    batch, and a frozen dataclass's constructor cost about 20 times as much."""

    key: Key
    guard: Guard
    row: RowImage | None
    keep: frozenset[str] = frozenset()
    """Columns whose value is not in ``row``: the target keeps the stored value."""
    keep_from: Key | None = None
    """Whose stored row holds the kept values (the old key of a key change); None: ``key``'s."""
    seq: int = -1
    """The sequence number of the event it comes from."""

    @property
    def deleted(self) -> bool:
        return self.row is None


@dataclass(frozen=True, slots=True)
class TablePlan:
    """What to do to one replica table, in this order: apply ``schema``; if ``truncate`` is
    set, delete every row (tombstones too) whose guard is below it and store it as the
    table's barrier; then write each change where the stored guard is smaller or no row
    exists. Kept values are read from the rows as stored before the changes are written.
    Table plans are applied in the order of :attr:`Plan.tables`; the same table may come
    twice (see the module docstring)."""

    table: TableId
    truncate: Guard | None
    changes: tuple[RowChange, ...]
    schema: tuple[ChangeEvent, ...] = ()


def decoded(row: RowImage) -> Row:
    return row.decode() if isinstance(row, EncodedRow) else row


def decoded_rows(plan: TablePlan) -> list[Row | None]:
    """The after-images of ``plan``'s changes, decoded, in order (None: a tombstone)."""
    return [row.decode() if isinstance(row, EncodedRow) else row
            for row in (c.row for c in plan.changes)]


class _TableFold:
    __slots__ = ("changes", "schema", "truncate")

    def __init__(self) -> None:
        self.truncate: Guard | None = None
        self.changes: dict[Key, RowChange] = {}
        self.schema: list[ChangeEvent] = []

    def plan(self, table: TableId) -> TablePlan:
        return TablePlan(table, self.truncate, tuple(self.changes.values()), tuple(self.schema))


class Fold:
    """A reduction being built (mutable; one per plan)."""

    def __init__(self, barriers: Mapping[TableId, Guard]) -> None:
        self.barriers = barriers
        self.tables: dict[TableId, _TableFold] = {}
        self.sealed: list[TablePlan] = []

    def plans(self) -> tuple[TablePlan, ...]:
        """Table plans to apply in this order (a table appears twice after a seal)."""
        return (*self.sealed, *(fold.plan(table) for table, fold in self.tables.items()))

    def _seal(self, table: TableId) -> _TableFold:
        self.sealed.append(self.tables[table].plan(table))
        fold = self.tables[table] = _TableFold()
        return fold

    def add(self, event: ChangeEvent, guard: Guard) -> None:
        """Reduce one event (in stream order) with its guard."""
        table = event.table
        if table is None:
            raise FatalOutputError(f"a {event.op.value} event (seq {event.seq}) names no table")
        barrier = self.barriers.get(table)
        if barrier is not None and guard <= barrier:
            return  # older than a truncate the replica already applied
        fold = self.tables.get(table)
        if fold is None:
            fold = self.tables[table] = _TableFold()
        op = event.op
        if (op is Op.READ or op is Op.INSERT or op is Op.UPDATE) and not event.unchanged \
                and event.old_key is None and event.after is not None:
            # the common case, as _upsert would do it: no kept columns, no key change
            key = _key(event.key, event)
            changes = fold.changes
            changes.pop(key, None)  # keep the dict in order of last change
            changes[key] = RowChange(key, guard, event.after, seq=event.seq)
        elif op is Op.TRUNCATE:
            fold.truncate = guard
            fold.changes.clear()
        elif op is Op.SCHEMA:
            fold.schema.append(event)
        elif op is Op.DELETE:
            key = _key(event.key, event)
            fold.changes.pop(key, None)  # keep the dict in order of last change
            fold.changes[key] = RowChange(key, guard, None, seq=event.seq)
        else:
            if _chains_to_moved_row(fold.changes, event):
                fold = self._seal(table)
            _upsert(fold.changes, event, guard)


def _key(key: Key | None, event: ChangeEvent) -> Key:
    if key is None:
        raise FatalOutputError(f"a {event.op.value} event of {event.table} (seq {event.seq}) "
                               "has no key", fix="give the table a primary key or a key "
                               "columns setting")
    return key


def _chains_to_moved_row(changes: Mapping[Key, RowChange], event: ChangeEvent) -> bool:
    """Whether ``event`` keeps columns that its row's previous change kept from another key."""
    if not event.unchanged:
        return False
    prev = changes.get(event.old_key if event.old_key is not None else _key(event.key, event))
    return (prev is not None and prev.keep_from is not None
            and not prev.keep.isdisjoint(event.unchanged))


def _upsert(changes: dict[Key, RowChange], event: ChangeEvent, guard: Guard) -> None:
    key = _key(event.key, event)
    if event.after is None:
        raise FatalOutputError(f"a {event.op.value} event of {event.table} (seq {event.seq}) "
                               "has no after-image")
    old = event.old_key
    change = _with_kept(changes, event, guard, key, key if old is None else old)
    if old is not None and old != key:
        changes.pop(old, None)
        changes[old] = RowChange(old, guard, None, seq=event.seq)
    changes.pop(key, None)
    changes[key] = change


def _with_kept(changes: Mapping[Key, RowChange], event: ChangeEvent, guard: Guard, key: Key,
               source: Key) -> RowChange:
    """The upsert of ``key``; unchanged columns come from ``source``'s earlier change in the
    reduction when it has them, else stay listed to be kept from the stored row."""
    assert event.after is not None
    if not event.unchanged:
        return RowChange(key, guard, event.after, seq=event.seq)
    prev = changes.get(source)
    if prev is None or prev.row is None:
        return RowChange(key, guard, event.after, frozenset(event.unchanged),
                         None if source == key else source, event.seq)
    row, earlier = dict(decoded(event.after)), decoded(prev.row)
    still = []
    for column in event.unchanged:
        if column in prev.keep or column not in earlier:
            still.append(column)
        else:
            row[column] = earlier[column]
    if not still:
        return RowChange(key, guard, row, seq=event.seq)
    # prev keeps its own key's stored values (else the fold was sealed): so does this change
    return RowChange(key, guard, row, frozenset(still), None if source == key else source,
                     event.seq)
