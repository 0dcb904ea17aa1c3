"""The state store contract: durable pipeline state with fenced compare-and-set writes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class StoredState:
    version: int
    data: dict[str, object]


class StateStore(Protocol):
    """Durable pipeline state with compare-and-set writes fenced by the leader epoch."""

    def load(self) -> StoredState | None: ...

    def save(self, data: dict[str, object], expected_version: int | None, epoch: int) -> int:
        """Write if the stored version is ``expected_version`` (None: must not exist) and
        ``epoch`` is not older than the stored epoch; return the new version or raise
        FencedError."""
        ...
