"""The real clock; tests use :class:`dblog.testing.FakeClock`."""

from __future__ import annotations

import time


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class SingleNodeLeadership:
    """Leader election for one embedded instance: always the leader, epoch fixed."""

    def __init__(self, epoch: int = 0) -> None:
        self._epoch = epoch

    @property
    def epoch(self) -> int:
        return self._epoch

    def is_leader(self) -> bool:
        return True
