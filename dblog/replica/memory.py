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
            if self.accepts(rows.get(change.key), change):
                rows[change.key] = StoredRow(change.guard, self._image(plan.table, change,
                                                                       before))

    def _image(self, table: TableId, change: RowChange, before: Mapping[Key, StoredRow]
               ) -> Row | None:
        if change.row is None:
            return None
        row = dict(decoded(change.row))
        if change.keep:
            source_key = change.key if change.keep_from is None else change.keep_from
            source = before.get(source_key)
            if source is None or source.row is None or not change.keep <= source.row.keys():
                raise FatalOutputError(
                    f"{table}: the change at seq {change.seq} keeps {sorted(change.keep)} of "
                    f"key {source_key!r}, which the replica does not hold")
            row.update((column, source.row[column]) for column in change.keep)
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
