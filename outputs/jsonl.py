"""JSON lines to a file or stdout.

Acknowledges a sequence number only after the line is flushed and fsynced. On open it cuts the
file back to the committed sequence number (lines written but never committed, and a torn last
line, are removed), so after a crash the file continues exactly where the committed state is.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import orjson
from pydantic import BaseModel, ConfigDict, Field

from dblog.core.model import ChangeEvent
from dblog.errors import DblogError, FatalOutputError, LeadershipLost
from dblog.formats.base import Format, TableLookup, format_by_name, no_tables
from dblog.runtime.paths import unwritable_reason
from dblog.spi import EncodedBatch, Finding

_BLOCK = 1 << 16


class JsonlConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str = "jsonl"
    path: str = "-"
    format: str = "native"
    format_options: dict[str, Any] = Field(default_factory=dict)
    """The format's own settings (e.g. debezium-json's ``before_image``); see docs/formats.md."""
    fsync: bool = True
    reset: bool = False
    """Erase the file when the pipeline starts without a state (seq 0) while the file holds
    events; otherwise that start is refused (the state was lost or removed: starting over
    would cut the file to nothing). Set it for one start, then remove it."""


def _line_seq(line: bytes) -> int | None:
    try:
        value = orjson.loads(line).get("seq")
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, int) else None


def truncate_after(path: Path, committed_seq: int) -> int:
    """Cut ``path`` after the last complete line whose seq <= committed_seq; return bytes cut."""
    size = path.stat().st_size
    with open(path, "rb+") as handle:
        keep = _find_cut(handle, size, committed_seq)
        if keep < size:
            handle.truncate(keep)
            handle.flush()
            os.fsync(handle.fileno())
    return size - keep


def _find_cut(handle: BinaryIO, size: int, committed_seq: int) -> int:
    """Scan lines backwards for the end of the last committed one (seq grows down the file).
    ``buf`` holds the bytes [buf_start, end of the unexamined region)."""
    buf, buf_start = b"", size
    while True:
        newline = buf.rfind(b"\n", 0, len(buf) - 1) if len(buf) > 1 else -1
        if newline < 0 and buf_start > 0:
            read_start = max(0, buf_start - _BLOCK)
            handle.seek(read_start)
            buf, buf_start = handle.read(buf_start - read_start) + buf, read_start
            continue
        line_start = newline + 1
        line = buf[line_start:]
        if line.endswith(b"\n"):  # a torn (unterminated) last line never counts
            seq = _line_seq(line[:-1])
            if seq is not None and seq <= committed_seq:
                return buf_start + line_start + len(line)
        buf = buf[:line_start]
        if not buf and buf_start == 0:
            return 0


def _identity(stat: os.stat_result) -> tuple[int, int]:
    return stat.st_dev, stat.st_ino


def _refuse_erasing(path: Path) -> None:
    """A start without a state (seq 0) would cut a file that holds events to nothing."""
    with open(path, "rb") as handle:
        first = handle.readline(1 << 20)
    if first.endswith(b"\n") and _line_seq(first[:-1]) is not None:
        raise FatalOutputError(
            f"output file {path} holds events, but the pipeline starts without a state: "
            "starting would erase them (the state file was lost or removed)",
            fix="restore the state; or, to start over, move the file away or set reset: true "
                "on this output for one start (docs/configuration.md)")


_PATH_FIX = ("set the jsonl output's path to a file in a folder that the user running dblog "
             "can create and write (or - for standard output)")


def _unwritable(path: str, exc: OSError) -> FatalOutputError:
    """A path open() cannot create, cut back or append to (a missing folder that cannot be
    made, a folder, no permission, a read-only file system)."""
    where = f" ({exc.filename})" if exc.filename and str(exc.filename) != path else ""
    what = "is a folder" if isinstance(exc, IsADirectoryError) else \
        f"cannot be written: {exc.strerror or exc}{where}"
    return FatalOutputError(f"outputs[].path of the jsonl output: {path} {what}",
                            fix=_PATH_FIX)


def _write_all(handle: BinaryIO, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = handle.write(view)
        if written is None:  # a non-blocking stdout that is full; buffered handles return all
            raise OSError("the output would block")
        view = view[written:]


class JsonlOutput:
    """A :class:`dblog.spi.Output` writing one JSON document per line. It is a
    :class:`dblog.spi.PreEncodingOutput`: with outputs on their own threads the engine calls
    :meth:`encode` and the output's thread :meth:`write_encoded`, never :meth:`write`, so a
    subclass that wraps the writing overrides :meth:`write_encoded`."""

    config_model = JsonlConfig

    def __init__(self, config: JsonlConfig | dict[str, Any] | None = None, *,
                 name: str | None = None) -> None:
        self.config = config if isinstance(config, JsonlConfig) else JsonlConfig(**(config or {}))
        try:
            self.format: Format = format_by_name(self.config.format,
                                                 self.config.format_options or None)
        except DblogError as exc:
            raise FatalOutputError(f"jsonl output {self.config.path}: {exc.message}",
                                   fix=exc.fix) from None
        self.name = name or f"jsonl:{self.config.path}"
        self._handle: BinaryIO | None = None
        self._identity: tuple[int, int] | None = None
        self._fence: Callable[[], bool] | None = None
        self._tables: TableLookup = no_tables
        self._written = -1
        self._durable = -1

    def set_tables(self, lookup: TableLookup) -> None:
        """The source's table metadata, for formats that write it (:class:`TableAwareOutput`)."""
        self._tables = lookup

    def set_fence(self, may_write: Callable[[], bool]) -> None:
        """Whether this instance may still write (leadership). It is checked after encoding,
        right before the write system call, so a leader frozen mid-batch (SIGSTOP, a VM stall)
        cannot append that batch after it was deposed (:class:`dblog.spi.FencedOutput`)."""
        self._fence = may_write

    @classmethod
    def from_config(cls, raw: dict[str, Any]) -> JsonlOutput:
        return cls(JsonlConfig(**raw))

    def fresh_start(self) -> None:
        """The pipeline starts without a state (:class:`dblog.spi.FreshStartAware`): a file
        that holds events would be cut to nothing, so the start is refused unless ``reset``."""
        path = Path(self.config.path)
        if self.config.path != "-" and not self.config.reset and path.exists():
            _refuse_erasing(path)

    def check(self) -> list[Finding]:
        """``dblog check``: whether :meth:`open` could append to the path
        (:class:`dblog.spi.Checkable`)."""
        reason = None if self.config.path == "-" else unwritable_reason(Path(self.config.path))
        if reason is None:
            return []
        return [Finding("error", f"outputs[].path of the jsonl output: {self.config.path} "
                                 f"{reason}", _PATH_FIX)]

    def open(self, committed_seq: int) -> None:
        if self.config.path == "-":
            self._handle = sys.stdout.buffer
        else:
            try:
                self._handle = self._open_file(Path(self.config.path), committed_seq)
            except OSError as exc:
                raise _unwritable(self.config.path, exc) from exc
            self._identity = _identity(os.fstat(self._handle.fileno()))
        self._written = self._durable = committed_seq

    @staticmethod
    def _open_file(path: Path, committed_seq: int) -> BinaryIO:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            truncate_after(path, committed_seq)
        # unbuffered: every write is the system call itself, made right after the fence
        return open(path, "ab", buffering=0)  # closed in close()

    def write(self, events: Sequence[ChangeEvent]) -> None:
        self.write_encoded(self.encode(events))

    def encode(self, events: Sequence[ChangeEvent]) -> EncodedBatch:
        """The batch's lines (CPU only; the engine may call it on its own thread while an
        earlier batch is written, :class:`dblog.spi.PreEncodingOutput`)."""
        return EncodedBatch(self.format.encode_lines(events, self._tables), len(events),
                            events[-1].seq if events else -1)

    def write_encoded(self, batch: EncodedBatch) -> None:
        handle = self._require()
        if self._fence is not None and not self._fence():
            raise LeadershipLost(f"leadership lost: {batch.count} event(s) not written to "
                                 f"{self.config.path}")
        try:
            _write_all(handle, batch.data)
        except OSError as exc:
            raise FatalOutputError(f"writing {self.config.path} failed: {exc}") from exc
        if batch.count:
            self._written = batch.last_seq

    def flush(self) -> int:
        handle = self._require()
        if self._durable == self._written:
            return self._durable
        try:
            handle.flush()
            if self.config.fsync and self.config.path != "-":
                os.fsync(handle.fileno())
        except OSError as exc:
            raise FatalOutputError(f"flushing {self.config.path} failed: {exc}") from exc
        self._check_same_file()
        self._durable = self._written
        return self._durable

    def _check_same_file(self) -> None:
        """Before anything is acknowledged: the path still names the file being written (it
        was not removed, renamed or replaced meanwhile, which would lose what was written into
        the old file once the state commits it)."""
        if self._identity is None:
            return
        try:
            now = _identity(os.stat(self.config.path))
        except FileNotFoundError:
            now = None
        if now != self._identity:
            what = "removed" if now is None else "replaced by another file"
            raise FatalOutputError(
                f"output file {self.config.path} was {what} while dblog wrote to it: events "
                f"after seq {self._durable} went into the old file and are not committed",
                fix="put the file back and restart (the output is cut back to the committed "
                    "state), or, to start over, remove the state and set reset: true on the "
                    "output for one start")

    def _require(self) -> BinaryIO:
        if self._handle is None:
            raise FatalOutputError(f"output {self.name} is not open")
        return self._handle

    def discard(self) -> None:
        """Close without writing what is still buffered: a deposed leader must not append to a
        file its successor owns. The buffer is drained into /dev/null through the same fd."""
        handle = self._handle
        self._handle = None
        if handle is None or self.config.path == "-":
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, handle.fileno())
        finally:
            os.close(devnull)
        handle.close()

    def close(self) -> None:
        if self._handle is not None and self.config.path != "-":
            self._handle.close()
        self._handle = None
