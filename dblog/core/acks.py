"""Acknowledgement logic: which state may be committed given what outputs acknowledged.

Each emitted stretch of the stream ends at a commit point: after a source transaction's COMMIT
(the position to resume the log from) or after the rows of a chunk (the dump's new progress).
A commit point becomes committable once every output acknowledged its sequence number; the
state then advances to the newest such point and never further.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from dblog.core.dumps import Dump, DumpQueue, DumpState
from dblog.core.positions import Position


@dataclass(frozen=True, slots=True)
class CommitPoint:
    seq: int
    position: Position | None
    dump: Dump | None = None


@dataclass(frozen=True, slots=True)
class PipelineState:
    """The durable state: resume position, last committed sequence number, the dump queue."""

    position: Position | None = None
    seq: int = 0
    dumps: DumpQueue = field(default_factory=DumpQueue)


def min_acknowledged(acks: Mapping[str, int]) -> int:
    """The highest sequence number every output has made durable."""
    return min(acks.values()) if acks else -1


def split_acknowledged(
    points: Iterable[CommitPoint], acked_seq: int
) -> tuple[list[CommitPoint], list[CommitPoint]]:
    """Split pending points (in stream order) into committable ones and those still waiting."""
    done: list[CommitPoint] = []
    waiting: list[CommitPoint] = []
    for point in points:
        (done if point.seq <= acked_seq and not waiting else waiting).append(point)
    return done, waiting


def apply_points(state: PipelineState, points: Iterable[CommitPoint]) -> PipelineState:
    """The state after committing ``points`` in order."""
    for point in points:
        dumps = state.dumps
        if point.dump is not None:
            dumps = _merge_dump(dumps, point.dump)
        position = point.position if point.position is not None else state.position
        state = replace(state, position=position, seq=max(state.seq, point.seq), dumps=dumps)
    return state


_USER_STATES = frozenset({DumpState.PAUSED, DumpState.CANCELLED, DumpState.FAILED})


def _merge_dump(dumps: DumpQueue, snapshot: Dump) -> DumpQueue:
    """Progress comes from the snapshot; a state an operator set (pause, cancel) wins over it."""
    committed = dumps.get(snapshot.id)
    if committed is None:
        return dumps.add(snapshot)
    if committed.state in _USER_STATES and snapshot.state is not DumpState.DONE:
        snapshot = replace(snapshot, state=committed.state, error=committed.error)
    return dumps.put(snapshot)


def with_dump_state(state: PipelineState, dump: Dump) -> PipelineState:
    """The committed state with ``dump``'s state (not its progress) applied now."""
    old = state.dumps.get(dump.id)
    if old is None:
        return replace(state, dumps=state.dumps.add(dump))
    return replace(state, dumps=state.dumps.put(replace(old, state=dump.state, error=dump.error)))


def adopted(checkpoint: PipelineState, stored: PipelineState) -> PipelineState:
    """The state to resume from when an output's checkpoint is ahead of the stored state:
    position, seq and dump progress from the checkpoint; the dumps an operator requested, paused
    or cancelled since it was taken (saved to the store at once, not yet in a checkpoint) from
    the store, so an accepted request or a cancel is never undone."""
    dumps = checkpoint.dumps
    for dump in stored.dumps.dumps:
        taken = dumps.get(dump.id)
        if taken is None:
            dumps = dumps.add(dump)
        elif dump.state in _USER_STATES and taken.state is not DumpState.DONE:
            dumps = dumps.put(replace(taken, state=dump.state, error=dump.error))
    return replace(checkpoint, dumps=dumps)
