"""The sink side: an output receives batches in stream order and acknowledges what is durable.
Abilities some outputs have are separate, checkable protocols (see :mod:`dblog.spi.findings`
for :class:`~dblog.spi.findings.Checkable`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from dblog.core.model import ChangeEvent, TableId, TableInfo


@runtime_checkable
class Output(Protocol):
    """Receives events in stream order and acknowledges what is durable."""

    name: str

    def open(self, committed_seq: int) -> None:
        """Start; ``committed_seq`` is the last sequence number in the committed state.

        Outputs that can (files, transactional sinks) drop anything they hold beyond it, so a
        restart replays exactly from the committed state.
        """

    def write(self, events: Sequence[ChangeEvent]) -> None:
        """Accept a batch; may buffer. Raises OutputError on failure."""

    def flush(self) -> int:
        """Make everything written durable; return the highest durable sequence number."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class FencedOutput(Protocol):
    """An output that asks, right before each write reaches its target, whether this instance
    still leads; the engine gives it the question once, before :meth:`Output.open`."""

    def set_fence(self, may_write: Callable[[], bool]) -> None: ...


@runtime_checkable
class DiscardingOutput(Protocol):
    """An output that buffers: a deposed leader calls :meth:`discard` instead of
    :meth:`Output.close`, so nothing it still holds is written after its successor started."""

    def discard(self) -> None: ...


@dataclass(frozen=True)
class Checkpoint:
    """The pipeline state as of a commit point, for an output to commit atomically with its
    data. ``state`` is the JSON the state store holds (position, seq, dumps)."""

    pipeline: str
    epoch: int
    state: dict[str, object]

    @property
    def seq(self) -> int:
        seq = self.state.get("seq", 0)
        assert isinstance(seq, int)
        return seq


@runtime_checkable
class PipelineBound(Protocol):
    """An output that needs to know its pipeline and the leader epoch (a transactional id,
    headers, fencing in the target); told once per run, before :meth:`Output.open`."""

    def bind(self, pipeline: str, epoch: int) -> None: ...


@runtime_checkable
class FreshStartAware(Protocol):
    """An output told when the pipeline starts without any stored state (its very first start,
    or a state that was lost or removed), right before :meth:`Output.open` gets committed seq 0:
    an output that holds events raises then (FatalOutputError with the fix) rather than cut
    them away, unless its configuration asks for that."""

    def fresh_start(self) -> None: ...


@runtime_checkable
class CheckpointingOutput(Protocol):
    """An output that commits a :class:`Checkpoint` in the same target transaction as its data
    (a Kafka transaction, a SQL transaction, a Delta commit), so a crash between its commit and
    the state store's save loses nothing and duplicates nothing:

    * :meth:`flush_checkpoint` replaces :meth:`Output.flush`: it makes everything written so
      far durable together with ``checkpoint`` (whose seq is at most the last written seq) and
      returns the highest durable seq. The target refuses the commit when a newer epoch
      committed already.
    * :meth:`committed_checkpoint`, after :meth:`Output.open`, returns the checkpoint of the
      output's last commit (None: none). When it is ahead of the state store's, the engine
      adopts it when the output is the pipeline's only one: the run resumes from that state.
      Events the output committed past the checkpoint's seq (the open source transaction at
      that point) come again on replay with the same sequence numbers, and the output skips
      them: the log replays identically from a commit point, and chunk rows are always
      followed by a commit point before the next flush. With several outputs the run resumes
      from the state store, and such an output must take the replay of what it holds (the
      replica outputs' position guards make it a no-op), unless it is a
      :class:`SoleOutput` that says it cannot.
    """

    def flush_checkpoint(self, checkpoint: Checkpoint) -> int: ...

    def committed_checkpoint(self) -> Checkpoint | None: ...


@runtime_checkable
class SoleOutput(Protocol):
    """An output that may have to be the pipeline's only one: when :meth:`needs_to_be_sole`
    says so (Kafka exactly-once: a replay from the state store after a crash can carry other
    sequence numbers than what Kafka holds, which it would skip by seq), the engine refuses
    other outputs beside it at start."""

    def needs_to_be_sole(self) -> bool: ...


@runtime_checkable
class TableAwareOutput(Protocol):
    """An output whose format writes table metadata (columns, types, key names): the engine
    gives it a lookup into the source's catalog before :meth:`Output.open`. The lookup may be
    called from the output's own thread; it returns None for a table the source cannot
    describe."""

    def set_tables(self, lookup: Callable[[TableId], TableInfo | None]) -> None: ...


@dataclass(frozen=True, slots=True)
class EncodedBatch:
    """A batch of events already turned into the bytes an output carries."""

    data: bytes
    count: int
    last_seq: int
    """The sequence number of the batch's last event (-1 for an empty batch)."""


@runtime_checkable
class PreEncodingOutput(Protocol):
    """An output whose write is CPU-only encoding followed by transport I/O (a file). With
    outputs on their own threads, the engine calls :meth:`encode` on its thread and the
    output's thread only :meth:`write_encoded`.

    Why: under the interpreter lock two CPU-bound threads take turns, so encoding on the
    output's thread gains nothing and costs the log loop a lock hand-over at each of its many
    small I/O calls (JSON-lines output, ``bench/run.py`` on PostgreSQL, 1M updates: 0.72-0.74
    of the raw consumer's rate with the encoding on the output's thread, 0.87-0.89 with it on
    the engine's). The transport's system calls release the lock, so the writes and fsyncs
    still overlap the loop. ``write(events)`` must equal ``write_encoded(encode(events))``."""

    def encode(self, events: Sequence[ChangeEvent]) -> EncodedBatch: ...

    def write_encoded(self, batch: EncodedBatch) -> None: ...
