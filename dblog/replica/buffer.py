"""The events a replica output holds until its next commit, and when that commit is due.

The SQL, Delta and Spark outputs buffer what ``write`` hands them and commit it together:
either ``write`` commits on its own once ``commit_every`` events wait, or a flush commits when
it is due. :class:`CommitBuffer` is that bookkeeping, without any target.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from dblog.core.model import ChangeEvent

Clock = Callable[[], float]
"""Seconds on a monotonic clock (``time.monotonic``; tests pass a fake one)."""


class CommitBuffer:
    """Events waiting for a commit, with the retried-batch rule and the due rule.

    Guarantees:

    * :meth:`write` buffers a batch once: the engine retries a batch whose commit failed by
      handing the same object again, and that call does not buffer it a second time (any
      other batch, even an equal one, is buffered);
    * :meth:`write` calls ``commit`` as soon as ``commit_every`` events wait, and only then;
    * :meth:`due` is true when ``commit_every`` events wait, or the last commit (or the
      buffer's creation) is at least ``commit_interval_s`` old on ``clock``, or events wait
      and none arrived for ``commit_idle_s`` (the end of a burst is not held for the whole
      interval); with ``commit_interval_s`` 0 it is always true;
    * events leave the buffer only through :meth:`committed` (once the caller made them
      durable) or :meth:`clear` (a reopened or deposed output), in the order they came.
    """

    def __init__(self, commit_every: int, commit_interval_s: float = 0.0,
                 clock: Clock = time.monotonic, commit_idle_s: float | None = None) -> None:
        self.commit_every = commit_every
        self.commit_interval_s = commit_interval_s
        self.commit_idle_s = commit_idle_s
        self._clock = clock
        self._events: list[ChangeEvent] = []
        self._retrying: Sequence[ChangeEvent] | None = None
        self._last_commit = self._last_write = clock()

    @property
    def events(self) -> list[ChangeEvent]:
        """The buffered events, oldest first (the caller reads, never changes them)."""
        return self._events

    def __len__(self) -> int:
        return len(self._events)

    def write(self, events: Sequence[ChangeEvent], commit: Callable[[], object],
              on_new: Callable[[Sequence[ChangeEvent]], object] | None = None) -> None:
        """Buffer ``events`` (``on_new`` is told of them) unless they are the batch whose
        commit failed; then ``commit()`` if ``commit_every`` events wait. When ``commit``
        raises, the batch stays the one a retry hands again."""
        if events is not self._retrying:
            self._events.extend(events)
            if events:
                self._last_write = self._clock()
            if on_new is not None:
                on_new(events)
        self._retrying = events
        if self.full():
            commit()
        self._retrying = None

    def full(self) -> bool:
        """``commit_every`` events (or more) wait."""
        return len(self._events) >= self.commit_every

    def due(self) -> bool:
        """Whether a flush commits now (``commit_every``, ``commit_interval_s`` or
        ``commit_idle_s``)."""
        if self.commit_interval_s <= 0 or self.full():
            return True
        now, idle = self._clock(), self.commit_idle_s
        return (now - self._last_commit >= self.commit_interval_s or
                (idle is not None and bool(self._events) and now - self._last_write >= idle))

    def committed(self) -> float:
        """The buffered events are durable: drop them and restart the interval; returns the
        clock's time of the commit."""
        self._events = []
        self._last_commit = self._clock()
        return self._last_commit

    def clear(self) -> None:
        """Drop what is buffered and forget a failed batch (an output reopened or deposed)."""
        self._events = []
        self._retrying = None
