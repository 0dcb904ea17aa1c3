"""The command channel: calls from other threads, carried out by the engine thread between
loop turns.

Control calls (a dump request, pause, a knob change, stop) arrive on any thread, while the
engine's state may only change on the engine thread. A call becomes a command (a callable)
queued here; :meth:`CommandChannel.apply` runs the queued commands in arrival order at the top
of each loop turn. After a command is queued, the waker (the log reader's
:meth:`~dblog.spi.WakeableLogReader.wakeup`, when it has one) cuts short a poll of an idle log,
so a command does not wait for the poll timeout.
"""

from __future__ import annotations

import queue
from collections.abc import Callable

Command = Callable[[], None]


class CommandChannel:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self._waker: Callable[[], None] | None = None

    def set_waker(self, waker: Callable[[], None] | None) -> None:
        """What wakes the engine thread (None: nothing; the command waits for the poll)."""
        self._waker = waker

    def submit(self, command: Command) -> None:
        """Queue ``command`` (any thread) and wake the engine thread."""
        self._queue.put(command)
        self.wake()

    def wake(self) -> None:
        waker = self._waker
        if waker is not None:
            waker()

    def apply(self) -> int:
        """Run every queued command (engine thread); return how many ran."""
        ran = 0
        while True:
            try:
                command = self._queue.get_nowait()
            except queue.Empty:
                return ran
            command()
            ran += 1

    def empty(self) -> bool:
        return self._queue.empty()
