"""A replica on dicts: the executable meaning of a :class:`~dblog.replica.apply.Plan`.

SQL, Delta and Spark writers do what :meth:`MemoryReplica.apply` does, in their own
statements; their tests can compare a target with this class fed the same plans.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dblog.core.model import Key, Row, TableId
from dblog.errors import FatalOutputError

from .apply import Plan
from .guard import Guard
from .reduce import RowChange, TablePlan, decoded


@dataclass(frozen=True, slots=True)
class StoredRow:
    """A replica row: its guard and values, or a tombstone (``row`` None)."""

    guard: Guard
    row: Row | None


class MemoryReplica:
    def __init__(self) -> None:
        self.tables: dict[TableId, dict[Key, StoredRow]] = {}
        self.barriers: dict[TableId, Guard] = {}
        self.scheme: str | None = None
        self.left_out: list[tuple[TableId, Key]] = []
        """Changes left out: they keep columns of rows the replica does not hold."""

    def accepts(self, stored: StoredRow | None, change: RowChange) -> bool:
        """The guard: replace only where the incoming change is later in commit order."""
        return stored is None or change.guard > stored.guard

    def apply(self, plan: Plan) -> None:
        """Apply one plan (a writer does this in one target transaction)."""
        if plan.scheme is not None:
            if self.scheme is not None and self.scheme != plan.scheme:
                raise FatalOutputError(f"the replica's guards are {self.scheme!r}, the plan's "
                                       f"{plan.scheme!r}", fix="rebuild the replica")
            self.scheme = plan.scheme
        for table_plan in plan.tables:
            self._apply_table(table_plan)
        for table, barrier in plan.barriers.items():
            if table not in self.barriers or barrier > self.barriers[table]:
                self.barriers[table] = barrier

    def _apply_table(self, plan: TablePlan) -> None:
        rows = self.tables.setdefault(plan.table, {})
        if plan.truncate is not None:
            for key in [k for k, r in rows.items() if r.guard < plan.truncate]:
                del rows[key]
        before = dict(rows) if any(c.keep for c in plan.changes) else rows
        for change in plan.changes:
            if not self.accepts(rows.get(change.key), change):
                continue
            if change.row is None:
                rows[change.key] = StoredRow(change.guard, None)
            elif (image := self._image(change, before)) is not None:
                rows[change.key] = StoredRow(change.guard, image)
            else:
                self.left_out.append((plan.table, change.key))

    @staticmethod
    def _image(change: RowChange, before: Mapping[Key, StoredRow]) -> Row | None:
        """The row to store, or None when the change keeps columns of a row the replica
        does not hold (missing or a tombstone): left out, as :mod:`dblog.replica.kept`; a
        kept column the stored row lacks reads None, as in a writer's table."""
        assert change.row is not None
        row = dict(decoded(change.row))
        if change.keep:
            source_key = change.key if change.keep_from is None else change.keep_from
            source = before.get(source_key)
            if source is None or source.row is None:
                return None
            kept = source.row
            row.update((column, kept.get(column)) for column in change.keep)
        return row

    def live(self, table: TableId) -> dict[Key, Row]:
        """The table as readers see it: tombstones hidden."""
        return {k: r.row for k, r in self.tables.get(table, {}).items() if r.row is not None}

    def purge(self, bound: Guard) -> int:
        """Delete the tombstones whose guard is below ``bound``; how many went."""
        gone = 0
        for rows in self.tables.values():
            dead = [k for k, r in rows.items() if r.row is None and r.guard < bound]
            for key in dead:
                del rows[key]
            gone += len(dead)
        return gone
