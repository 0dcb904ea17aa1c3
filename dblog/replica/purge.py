"""When a replica output purges tombstones, and below which guard (docs/replica.md).

The SQL, Delta and Spark outputs purge after a commit that stored the engine's checkpoint,
at most every ``purge_interval_s``, below :func:`~dblog.replica.guard.purge_bound` of that
checkpoint's position; :class:`PurgeSchedule` is that rule, without any target.
"""

from __future__ import annotations

import time

from dblog.core.positions import decode_position
from dblog.spi import Checkpoint

from .buffer import Clock
from .guard import Guard, purge_bound, scheme_for


class PurgeSchedule:
    """The tombstone purge of one output.

    Guarantees: :meth:`bound` is None (no purge now) when ``margin`` is None, when the
    commit stored no checkpoint or one without a position, or when the last purge (or the
    schedule's creation) is less than ``interval_s`` old on ``clock``; else it is
    ``purge_bound`` of the checkpoint's position with ``margin``. It decodes the position
    only then (a position no connector can decode raises there). The interval restarts only
    at :meth:`purged`, so a purge that failed is tried again at the next commit.
    """

    def __init__(self, margin: int | None, interval_s: float,
                 clock: Clock = time.monotonic) -> None:
        self.margin, self.interval_s = margin, interval_s
        self._clock = clock
        self._last = clock()

    def bound(self, covered: Checkpoint | None) -> Guard | None:
        """The guard below which tombstones may go after a commit that stored ``covered``."""
        text = None if covered is None else covered.state.get("position")
        if self.margin is None or not isinstance(text, str) or \
                self._clock() - self._last < self.interval_s:
            return None
        position = decode_position(text)
        if position is None:
            return None
        return purge_bound(scheme_for(position), position, self.margin)

    def purged(self) -> None:
        """The tombstones below the last bound are gone: restart the interval."""
        self._last = self._clock()
