"""The apply core of replica outputs: a batch of events in, a plan for the target out.

:func:`plan_batch` is pure: ``(state, batch) -> (state, plan)``. The state carries what one
batch leaves to the next: the guard scheme, the open transaction (a batch may end, and the
next begin, inside one), the last transaction's major, and each table's truncate barrier.
An output keeps the state that came with the last plan it made durable and calls again with
the old state when it retries a batch; after a restart it starts from
``ApplyState.restored(...)`` with the scheme name and barriers it stored beside its rows (the
engine replays from a transaction boundary, so no transaction is open then).

Guards (:mod:`dblog.replica.guard`): an event of transaction T gets ``(major(T), i)``. Where
the major is only known at COMMIT (:data:`~dblog.replica.guard.POSTGRES_AT_COMMIT`, for a
PostgreSQL connector whose BEGIN carries only the first LSN), the transaction's events are
held in the state until the COMMIT arrives, and :attr:`Plan.through_seq` stays before the
transaction's BEGIN, so the output acknowledges nothing it has not written; their memory is
bounded by the open transaction's size, not the batch size. dblog's own PostgreSQL connector
puts the commit end on BEGIN (:data:`~dblog.replica.guard.POSTGRES`): nothing is held.

The plan (:class:`Plan`) is plain data for SQL, Delta and Spark writers; what each part means
is :class:`~dblog.replica.reduce.TablePlan`'s contract, executed on dicts by
:class:`dblog.replica.memory.MemoryReplica`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain

from dblog.core.model import ChangeEvent, Op, TableId
from dblog.core.positions import Position
from dblog.errors import FatalOutputError

from .guard import MAX_MINOR, Guard, GuardScheme, MajorFrom, scheme_for
from .reduce import Fold, TablePlan


@dataclass(frozen=True, slots=True)
class OpenTxn:
    """A transaction whose BEGIN was seen and whose COMMIT was not yet."""

    begin_seq: int
    major: int | None = None
    """Known once its BEGIN (BEGIN schemes) or an event (EVENT schemes) gave it."""
    count: int = 0
    """Events of the transaction so far (dump rows not counted; 0 while they are held)."""
    held: tuple[tuple[ChangeEvent, ...], ...] = ()
    """COMMIT schemes: the transaction's events so far, one tuple per batch."""


@dataclass(frozen=True, slots=True)
class ApplyState:
    scheme: GuardScheme | None = None
    txn: OpenTxn | None = None
    last_major: int = -1
    """The major of the last transaction (the next one must have a greater one)."""
    barriers: Mapping[TableId, Guard] = field(default_factory=dict)

    @classmethod
    def restored(cls, scheme: GuardScheme | None, barriers: Mapping[TableId, Guard]
                 ) -> ApplyState:
        """The state after a restart: the stored scheme and barriers, no open transaction."""
        return cls(scheme=scheme, barriers=dict(barriers))


@dataclass(frozen=True, slots=True)
class Plan:
    tables: tuple[TablePlan, ...]
    through_seq: int
    """Every event up to this sequence number is in this plan or an earlier one (the output
    may acknowledge it once the plan is durable); -1 when nothing is."""
    barriers: Mapping[TableId, Guard]
    """Every table's barrier after this plan: store them with the rows, in the same commit."""
    position: Position | None
    """The position of the last COMMIT in the plan (for the sink checkpoint), if any."""
    scheme: str | None
    """The guard scheme's name: store it with the rows; a replica refuses another one."""


def plan_batch(state: ApplyState, batch: Sequence[ChangeEvent]) -> tuple[ApplyState, Plan]:
    """Reduce ``batch`` (the events after those ``state`` has seen, in stream order)."""
    planner = _Planner(state)
    for event in batch:
        planner.feed(event)
    return planner.finish(state, batch)


class _Planner:
    """One batch's work: assigns guards in stream order and reduces the guarded events."""

    def __init__(self, state: ApplyState) -> None:
        self.scheme = state.scheme
        self.txn = state.txn
        self.held: list[ChangeEvent] = []
        self.last_major = state.last_major
        self.barriers = dict(state.barriers)
        self.fold = Fold(state.barriers)
        self.position: Position | None = None
        self._cache: tuple[Position | None, int] = (None, 0)
        self._read = Guard(-1, MAX_MINOR)

    def feed(self, event: ChangeEvent) -> None:
        op = event.op
        if op is Op.BEGIN:
            self._begin(event)
        elif op is Op.COMMIT:
            self._commit(event)
        elif op is Op.READ:
            if self._holding():
                self.held.append(event)
            else:
                self.fold.add(event, self._read_guard(event))
        else:
            self._change(event)

    def _read_guard(self, event: ChangeEvent) -> Guard:
        """A dump row's guard: ``(major(H), MAX_MINOR)``, one object for a chunk's rows."""
        major = self._major(event)
        if self._read.major != major:
            self._read = Guard(major, MAX_MINOR)
        return self._read

    def _holding(self) -> bool:
        return (self.txn is not None and self.scheme is not None
                and self.scheme.major_from is MajorFrom.COMMIT)

    def _whole_transactions(self) -> bool:
        """Whether the scheme needs each BEGIN matched by a COMMIT before the next one."""
        return self.scheme is not None and self.scheme.major_from is not MajorFrom.EVENT

    def _major(self, event: ChangeEvent) -> int:
        position = event.position
        if position is None:
            raise FatalOutputError(f"a {event.op.value} event (seq {event.seq}) has no "
                                   "position: its replica guard is unknown")
        cached, major = self._cache
        if position is cached:  # a transaction's or a chunk's events share one position
            return major
        if self.scheme is None:
            self.scheme = scheme_for(position)
        major = self.scheme.major(position)
        self._cache = (position, major)
        return major

    def _begin(self, event: ChangeEvent) -> None:
        if self.txn is not None and self._whole_transactions():
            raise FatalOutputError(
                f"BEGIN (seq {event.seq}) before the COMMIT of the transaction that began at "
                f"seq {self.txn.begin_seq}: its rows cannot be guarded")
        if self.scheme is None and event.position is not None:
            self.scheme = scheme_for(event.position)
        major = None
        if self.scheme is not None and self.scheme.major_from is MajorFrom.BEGIN:
            major = self._next_major(self._major(event), event)
        self.txn = OpenTxn(event.seq, major)

    def _next_major(self, major: int, event: ChangeEvent) -> int:
        """A new transaction's major: it must be greater than the last one's."""
        if major <= self.last_major:
            assert self.scheme is not None
            raise FatalOutputError(
                f"the guard of the transaction at seq {event.seq} ({major}) is not after the "
                f"previous transaction's ({self.last_major}): positions of "
                f"{self.scheme.kind!r} are not in commit order here",
                fix="MariaDB: set gtid_strict_mode=ON; otherwise rebuild the replica")
        self.last_major = major
        return major

    def _change(self, event: ChangeEvent) -> None:
        txn = self.txn
        if txn is None:
            raise FatalOutputError(f"a {event.op.value} event (seq {event.seq}) outside a "
                                   "transaction: its replica guard is unknown")
        if self.scheme is None:
            self._major(event)  # learn the scheme
        assert self.scheme is not None
        if self.scheme.major_from is MajorFrom.COMMIT:
            self.held.append(event)
            return
        major = txn.major
        if self.scheme.major_from is MajorFrom.EVENT:
            major = self._event_major(txn, event)
        if major is None:
            raise FatalOutputError(f"the BEGIN (seq {txn.begin_seq}) of the {event.op.value} "
                                   f"event at seq {event.seq} has no position: its replica "
                                   "guard is unknown")
        self.txn = OpenTxn(txn.begin_seq, major, txn.count + 1)
        self._add(event, Guard(major, txn.count + 1))

    def _event_major(self, txn: OpenTxn, event: ChangeEvent) -> int:
        major = self._major(event)
        if txn.major is None:
            return self._next_major(major, event)
        if major < txn.major:
            raise FatalOutputError(f"the position of the event at seq {event.seq} goes back "
                                   "inside its transaction", fix="rebuild the replica")
        self.last_major = major
        return major

    def _commit(self, event: ChangeEvent) -> None:
        txn = self.txn
        if txn is None:
            raise FatalOutputError(f"COMMIT (seq {event.seq}) without a BEGIN")
        if self._holding():
            major = self._next_major(self._major(event), event)
            self._release(chain(chain.from_iterable(txn.held), self.held), major)
            self.held = []
        self.txn = None
        self.position = event.position

    def _release(self, events: Iterable[ChangeEvent], major: int) -> None:
        index = 0
        for event in events:
            if event.op is Op.READ:
                self.fold.add(event, self._read_guard(event))
            else:
                index += 1
                self._add(event, Guard(major, index))

    def _add(self, event: ChangeEvent, guard: Guard) -> None:
        self.fold.add(event, guard)
        if event.op is Op.TRUNCATE and event.table is not None:
            barrier = self.barriers.get(event.table)
            if barrier is None or guard > barrier:
                self.barriers[event.table] = guard

    def finish(self, state: ApplyState, batch: Sequence[ChangeEvent]
               ) -> tuple[ApplyState, Plan]:
        txn = self.txn
        through = batch[-1].seq if batch else -1
        if txn is not None and self._holding():
            held = (*txn.held, tuple(self.held)) if self.held else txn.held
            txn = OpenTxn(txn.begin_seq, None, txn.count, held)
            through = txn.begin_seq - 1
        new = ApplyState(self.scheme, txn, self.last_major, self.barriers)
        name = self.scheme.name if self.scheme is not None else None
        return new, Plan(self.fold.plans(), through, dict(self.barriers), self.position, name)
