"""State serialisation and the local-file state store.

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

from dblog.acks import PipelineState
from dblog.dumps import DumpQueue, dump_from_json, dump_to_json
from dblog.errors import FencedError, StateError
from dblog.positions import decode_position
from dblog.spi import StoredState


def check_fence(stored_version: int | None, stored_epoch: int, expected_version: int | None,
                epoch: int, where: str) -> None:
    """The compare-and-set rule of every state store: a write from an older leader epoch, or
    against a version other than the stored one, is refused with FencedError."""
    if epoch < stored_epoch:
        raise FencedError(f"state write with epoch {epoch} rejected: epoch {stored_epoch} "
                          f"owns {where}")
    if stored_version != expected_version:
        raise FencedError(f"state version is {stored_version}, expected {expected_version}: "
                          f"another writer changed {where}")


def state_to_json(state: PipelineState) -> dict[str, object]:
    return {
        "position": None if state.position is None else state.position.encode(),
        "seq": state.seq,
        "dumps": [dump_to_json(d) for d in state.dumps.dumps],
    }


def state_from_json(raw: dict[str, Any]) -> PipelineState:
    return PipelineState(
        position=decode_position(raw.get("position")),
        seq=int(raw.get("seq", 0)),
        dumps=DumpQueue(tuple(dump_from_json(d) for d in raw.get("dumps", []))),
    )


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
