"""One backoff policy for every retry loop (outputs, engine restarts, ZooKeeper connects, HA
terms), on the injected clock so tests run it in fake time.

:class:`Backoff` only computes delays: each loop decides how to wait (a clock sleep, or an
event wait that a stop request cuts short). :func:`retry` is the common loop for one action.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from dblog.errors import DblogError
from dblog.spi import Clock

T = TypeVar("T")
log = logging.getLogger("dblog.retry")


class Backoff:
    """Delays ``initial``, doubling up to ``cap``. :meth:`healthy` resets the sequence after a
    run that lasted ``reset_after_s`` (a long healthy run earns a fresh start)."""

    def __init__(self, clock: Clock, initial: float = 1.0, cap: float = 30.0,
                 reset_after_s: float | None = None) -> None:
        self.clock, self.initial, self.cap, self.reset_after_s = clock, initial, cap, reset_after_s
        self.delay = initial
        self.attempts = 0
        self._since = clock.monotonic()

    def next(self) -> float:
        """The delay before the next attempt (and count the attempt)."""
        delay = self.delay
        self.delay = min(self.delay * 2, self.cap)
        self.attempts += 1
        return delay

    def started(self) -> None:
        """An attempt starts now (for :meth:`healthy`)."""
        self._since = self.clock.monotonic()

    def healthy(self) -> bool:
        """Whether the attempt started last ran long enough to reset the delays; resets them."""
        if self.reset_after_s is None or \
                self.clock.monotonic() - self._since <= self.reset_after_s:
            return False
        self.delay, self.attempts = self.initial, 0
        return True

    def reset(self) -> None:
        self.delay, self.attempts = self.initial, 0


def retry(action: Callable[[], T], what: str, clock: Clock, *, attempts: int,
          initial: float = 0.1, cap: float = 10.0) -> T:
    """Run ``action``; a retryable :class:`DblogError` is retried up to ``attempts`` more
    times with backoff (logged); the last error, or a fatal one, is raised."""
    backoff = Backoff(clock, initial, cap)
    while True:
        try:
            return action()
        except DblogError as exc:
            if not exc.retryable or backoff.attempts >= attempts:
                raise
            delay = backoff.next()
            log.warning("%s failed (attempt %d), retrying in %.1fs: %s",
                        what, backoff.attempts, delay, exc)
            clock.sleep(delay)
