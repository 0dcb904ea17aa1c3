"""The local-file state store.

The file store keeps one JSON document, replaced atomically (write a temporary file, fsync,
rename, fsync the directory). Writes are compare-and-set on a version number and rejected when
they carry an epoch older than the stored one, so the contract matches the ZooKeeper store.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from pathlib import Path
from typing import Any

from dblog.errors import StateError
from dblog.spi import StoredState
from dblog.state.codec import check_fence, checked_document

_DAMAGED_FIX = ("restore the file from a backup; or, to start over, move it away (a jsonl output "
                "that holds events then needs reset: true for that start) and request a full "
                "dump")


class FileStateStore:
    """A :class:`dblog.spi.StateStore` in one local JSON file. Every way the file can be
    damaged, unreadable or unwritable is one :class:`StateError` naming the file and the fix;
    a damaged file is never overwritten."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._written: int | None = None
        """The version this store last wrote (a file gone since then was removed)."""

    def _read(self) -> dict[str, Any] | None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except IsADirectoryError as exc:
            raise self._a_folder() from exc
        except OSError as exc:
            raise StateError(f"cannot read state file {self.path}: {exc.strerror or exc}",
                             fix="check the file's owner and permissions: the user that runs "
                                 "dblog must read and write it") from exc
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise StateError(f"state file {self.path} is damaged: not valid JSON ({exc})",
                             fix=_DAMAGED_FIX) from exc
        return self._checked(doc)

    def _a_folder(self) -> StateError:
        return StateError(f"state.path {self.path} is a folder, not a file",
                          fix=f"set state.path to a file name, for example "
                              f"{self.path / 'dblog-state.json'}")

    def _checked(self, doc: Any) -> dict[str, Any]:
        return checked_document(doc, f"state file {self.path}", _DAMAGED_FIX, versioned=True)

    def load(self) -> StoredState | None:
        doc = self._read()
        if doc is None:
            return None
        return StoredState(version=doc["version"], data=doc["data"])

    def save(self, data: dict[str, object], expected_version: int | None, epoch: int) -> int:
        # the thread lock covers this instance, flock other instances and processes
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._lock, open(self.path.with_name(f".{self.path.name}.lock"), "a") as lock:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
                return self._save_locked(data, expected_version, epoch)
        except IsADirectoryError as exc:
            raise self._a_folder() from exc
        except OSError as exc:
            raise StateError(f"cannot write state file {self.path}: {exc.strerror or exc}",
                             fix=f"check free space and the permissions of {self.path.parent} "
                                 "(the user that runs dblog must write there)") from exc

    def _save_locked(self, data: dict[str, object], expected_version: int | None,
                     epoch: int) -> int:
        current = self._read()
        if current is None and expected_version is not None \
                and expected_version == self._written:  # this store wrote it: it was removed
            raise StateError(
                f"state file {self.path} was removed while the pipeline ran (its version was "
                f"{expected_version})", fix="put the file back and restart; or, to start over, "
                "restart without it (a jsonl output that holds events then needs reset: true)")
        current_version = None if current is None else int(current["version"])
        current_epoch = -1 if current is None else int(current.get("epoch", 0))
        check_fence(current_version, current_epoch, expected_version, epoch, str(self.path))
        version = 0 if current_version is None else current_version + 1
        self._replace({"version": version, "epoch": epoch, "data": data})
        self._written = version
        return version

    def _replace(self, doc: dict[str, Any]) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump(doc, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

