"""What a replica output has made durable, and the commit it prepares next.

The SQL, Delta and Spark outputs commit alike: skip a flush with nothing to write, refuse a
deposed leader, plan the buffered events from the state of the last commit, acknowledge up
to the plan's ``through_seq`` and store the engine's checkpoint only when it covers nothing
past that. :class:`ReplicaProgress` is that sequence; the output executes the plan between
:meth:`ReplicaProgress.begin` and :meth:`ReplicaProgress.finish`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from dblog.core.model import ChangeEvent, TableId
from dblog.errors import FatalOutputError, LeadershipLost
from dblog.spi import Checkpoint

from .apply import ApplyState, Plan, plan_batch
from .guard import Guard


@dataclass(frozen=True, slots=True)
class Commit:
    """One commit an output is about to make (nothing of it is recorded yet)."""

    state: ApplyState
    """The apply state after :attr:`plan`: the output's once the commit is durable."""
    plan: Plan
    """What to write (no tables when the output asked for no plan)."""
    through: int
    """The sequence number the output acknowledges once the commit is durable."""
    checkpoint: Checkpoint | None
    """The engine's checkpoint to store with the rows: the flush's, when it covers nothing
    past :attr:`through`; else None (keep the stored one)."""
    scheme: str | None
    """The guard scheme's name to store: the plan's, else the replica's."""


class ReplicaProgress:
    """The state of a replica output's last commit: apply state, guard scheme, checkpoint and
    acknowledged sequence number.

    Guarantees:

    * it changes only through :meth:`restore` and :meth:`finish`: a commit that failed
      leaves it as it was, so the retry plans the same events from the same state;
    * :meth:`begin` returns None (nothing to commit) when no event waits and the checkpoint
      is None or the one stored; else it asks ``may_write`` first and raises
      :class:`~dblog.errors.LeadershipLost` when it says no, then plans, and raises
      :class:`~dblog.errors.FatalOutputError` (with ``scheme_fix``) when the plan's guard
      scheme is not the replica's;
    * :attr:`durable` never goes back: a commit acknowledges at least what the last one did.
    """

    def __init__(self, name: str, scheme_fix: str) -> None:
        self.name, self.scheme_fix = name, scheme_fix
        self.state = ApplyState()
        self.scheme: str | None = None
        self.checkpoint: Checkpoint | None = None
        self.durable = 0

    def restore(self, scheme: str | None, barriers: Mapping[TableId, Guard],
                checkpoint: Checkpoint | None, durable: int) -> None:
        """The progress an output finds at open: what its target stored, and the sequence
        number the engine resumes after."""
        self.state = ApplyState.restored(None, barriers)
        self.scheme, self.checkpoint, self.durable = scheme, checkpoint, durable

    def begin(self, events: Sequence[ChangeEvent], checkpoint: Checkpoint | None,
              may_write: Callable[[], bool] | None, plan: bool = True) -> Commit | None:
        """The commit of ``events`` (all buffered since the last commit) with ``checkpoint``;
        ``plan`` False: the events as they are (an output without replica tables)."""
        if not events and (checkpoint is None or checkpoint == self.checkpoint):
            return None
        if may_write is not None and not may_write():
            raise LeadershipLost(f"leadership lost: {len(events)} event(s) not written "
                                 f"to {self.name}")
        state, planned = self._plan(events) if plan else (self.state, _unplanned(events))
        through = max(self.durable, planned.through_seq)
        covered = checkpoint if checkpoint is not None and checkpoint.seq <= through else None
        return Commit(state, planned, through, covered, planned.scheme or self.scheme)

    def _plan(self, events: Sequence[ChangeEvent]) -> tuple[ApplyState, Plan]:
        state, plan = plan_batch(self.state, events)
        if plan.scheme is not None and self.scheme not in (None, plan.scheme):
            raise FatalOutputError(f"{self.name}: the replica's guards are {self.scheme!r}, "
                                   f"the stream's {plan.scheme!r}", fix=self.scheme_fix)
        return state, plan

    def finish(self, commit: Commit) -> int:
        """``commit`` is durable: record it; returns the acknowledged sequence number."""
        self.state, self.durable = commit.state, commit.through
        self.scheme = commit.scheme
        self.checkpoint = commit.checkpoint or self.checkpoint
        return commit.through


def _unplanned(events: Sequence[ChangeEvent]) -> Plan:
    """A plan of no tables that covers ``events`` up to the last."""
    return Plan(tables=(), through_seq=events[-1].seq if events else -1, barriers={},
                position=None, scheme=None)
