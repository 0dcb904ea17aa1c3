"""A self-pipe: lets another thread interrupt a ``select`` on sockets (see
:class:`dblog.spi.WakeableLogReader`)."""

from __future__ import annotations

import contextlib
import os
import threading


class Wakeup:
    """``fileno()`` becomes readable after :meth:`set` until :meth:`clear`. Thread-safe: a
    set from any thread; many sets before one clear read as one."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        self._lock = threading.Lock()  # a set never writes to a closed (maybe reused) fd
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)

    def fileno(self) -> int:
        return self._read

    def set(self) -> None:
        with self._lock:
            if self._write < 0:
                return
            with contextlib.suppress(BlockingIOError):  # full: it is set already
                os.write(self._write, b"\0")

    def clear(self) -> bool:
        """Drain the pipe; whether it was set."""
        was_set = False
        try:
            while os.read(self._read, 4096):
                was_set = True
        except (BlockingIOError, OSError):
            pass
        return was_set

    def close(self) -> None:
        with self._lock:
            for fd in (self._read, self._write):
                if fd >= 0:
                    os.close(fd)
            self._read = self._write = -1
