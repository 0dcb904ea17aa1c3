"""Time and leadership, injected into the engine (tests pass fakes)."""

from __future__ import annotations

from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class LeaderElection(Protocol):
    @property
    def epoch(self) -> int: ...

    def is_leader(self) -> bool:
        """False as soon as leadership is in doubt; the engine stops emitting."""
        ...
