"""Riding out a server restart: retry a connection-level step with backoff on the injected
clock (tests pass :class:`dblog.testing.FakeClock`).

A routine restart of MariaDB takes a few seconds; the connector keeps trying for
``budget_s`` (the source's ``reconnect_timeout_s``) before it gives the error to the pipeline,
whose own restart from the committed state is the next line of defence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from dblog.errors import DblogError
from dblog.spi import Clock

log = logging.getLogger("dblog.connectors.mysql")

T = TypeVar("T")
FIRST_DELAY_S = 0.2
MAX_DELAY_S = 5.0


def with_backoff(step: Callable[[], T], clock: Clock, budget_s: float, doing: str) -> T:
    """``step()``, retried after retryable dblog errors with doubling delays (0.2 s up to
    5 s) until ``budget_s`` has passed; then the last error is raised."""
    deadline = clock.monotonic() + budget_s
    delay = FIRST_DELAY_S
    attempt = 0
    while True:
        try:
            return step()
        except DblogError as exc:
            attempt += 1
            if not exc.retryable or clock.monotonic() + delay > deadline:
                raise
            log.warning("%s failed (attempt %d, retrying in %.1fs): %s", doing, attempt,
                        delay, exc.message)
            clock.sleep(delay)
            delay = min(delay * 2, MAX_DELAY_S)
