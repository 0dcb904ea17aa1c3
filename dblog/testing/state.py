"""A state store in memory."""

from __future__ import annotations

import copy

from dblog.spi import StoredState


class MemoryStateStore:
    def __init__(self) -> None:
        self.stored: StoredState | None = None
        self.epoch = -1
        self.writes = 0

    def load(self) -> StoredState | None:
        return self.stored

    def save(self, data: dict[str, object], expected_version: int | None, epoch: int) -> int:
        from dblog.errors import FencedError

        current = None if self.stored is None else self.stored.version
        if epoch < self.epoch:
            raise FencedError(f"epoch {epoch} is older than {self.epoch}")
        if current != expected_version:
            raise FencedError(f"version is {current}, expected {expected_version}")
        version = 0 if current is None else current + 1
        self.stored, self.epoch = StoredState(version, copy.deepcopy(data)), epoch
        self.writes += 1
        return version
