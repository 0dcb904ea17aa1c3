"""The sink side: an output receives batches in stream order and acknowledges what is durable.
Abilities some outputs have are separate, checkable protocols (see :mod:`dblog.spi.findings`
for :class:`~dblog.spi.findings.Checkable`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from dblog.core.model import ChangeEvent


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
