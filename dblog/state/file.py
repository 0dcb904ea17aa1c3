"""The local-file state store.

The file store keeps one JSON document, replaced atomically (write a temporary file, fsync,
rename, fsync the directory). Writes are compare-and-set on a version number and rejected when
they carry an epoch older than the stored one, so the contract matches the ZooKeeper store.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from pathlib import Path
from typing import Any

from dblog.errors import StateError
from dblog.spi import StoredState
from dblog.state.codec import check_fence


class FileStateStore:
    """A :class:`dblog.spi.StateStore` in one local JSON file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def _read(self) -> dict[str, Any] | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            doc: dict[str, Any] = json.loads(text)
        except json.JSONDecodeError as exc:
            raise StateError(f"state file {self.path} is not valid JSON: {exc}",
                             fix="restore it from a backup or remove it to start over") from exc
        return doc

    def load(self) -> StoredState | None:
        doc = self._read()
        if doc is None:
            return None
        return StoredState(version=int(doc["version"]), data=doc["data"])

    def save(self, data: dict[str, object], expected_version: int | None, epoch: int) -> int:
        # the thread lock covers this instance, flock other instances and processes
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, open(self.path.with_name(f".{self.path.name}.lock"), "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            current = self._read()
            current_version = None if current is None else int(current["version"])
            current_epoch = -1 if current is None else int(current.get("epoch", 0))
            check_fence(current_version, current_epoch, expected_version, epoch, str(self.path))
            version = 0 if current_version is None else current_version + 1
            self._replace({"version": version, "epoch": epoch, "data": data})
            return version

    def _replace(self, doc: dict[str, Any]) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(doc, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
