"""Outputs in memory: a list, and a transactional list that commits checkpoints."""

from __future__ import annotations

from collections.abc import Sequence

from dblog.core.model import (
    ChangeEvent,
)
from dblog.spi import Checkpoint


class ListOutput:
    """Keeps events in a list; acknowledges everything written, or up to ``ack_limit``."""

    def __init__(self, name: str = "list") -> None:
        self.name = name
        self.events: list[ChangeEvent] = []
        self.ack_limit: int | None = None
        self.fail_next: Exception | None = None
        self.committed_seq = 0

    def open(self, committed_seq: int) -> None:
        self.events = [e for e in self.events if e.seq <= committed_seq]
        self.committed_seq = committed_seq

    def write(self, events: Sequence[ChangeEvent]) -> None:
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        self.events.extend(events)

    def flush(self) -> int:
        last = self.events[-1].seq if self.events else self.committed_seq
        return last if self.ack_limit is None else min(last, self.ack_limit)

    def close(self) -> None:
        pass


class TransactionalListOutput(ListOutput):
    """A :class:`dblog.spi.CheckpointingOutput` in memory, like a transactional target: writes
    are pending until a flush commits them together with the checkpoint; open drops what was
    never committed; events replayed up to the last committed seq are skipped."""

    def __init__(self, name: str = "transactional") -> None:
        super().__init__(name)
        self.pending: list[ChangeEvent] = []
        self.checkpoint: Checkpoint | None = None
        self.last_committed = 0
        self.skipped = 0

    def open(self, committed_seq: int) -> None:
        self.pending = []  # an open transaction is aborted

    def write(self, events: Sequence[ChangeEvent]) -> None:
        fresh = [e for e in events if e.seq > self.last_committed]
        self.skipped += len(events) - len(fresh)
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        self.pending.extend(fresh)

    def flush(self) -> int:
        return self.last_committed  # without a checkpoint nothing is committed

    def flush_checkpoint(self, checkpoint: Checkpoint) -> int:
        self.events.extend(self.pending)
        if self.pending:
            self.last_committed = self.pending[-1].seq
        self.pending, self.checkpoint = [], checkpoint
        return self.last_committed

    def committed_checkpoint(self) -> Checkpoint | None:
        return self.checkpoint
