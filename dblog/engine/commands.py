"""The command channel: calls from other threads, carried out by the engine thread between
loop turns.

Control calls (a dump request, pause, a knob change, stop) arrive on any thread, while the
engine's state may only change on the engine thread. A call becomes a command (a callable)
queued here; :meth:`CommandChannel.apply` runs the queued commands in arrival order at the top
of each loop turn. After a command is queued, the waker (the log reader's
:meth:`~dblog.spi.WakeableLogReader.wakeup`, when it has one) cuts short a poll of an idle log,
so a command does not wait for the poll timeout.

A command never outlives the run it was queued for: when a run ends, the commands it did not
apply are dropped (:meth:`CommandChannel.drop_all`), each telling its caller, so a request
answered as failed is not applied by a later run (a caller that retried would get it twice).
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from concurrent.futures import Future

from dblog.errors import DblogError

Command = Callable[[], None]


class Rejected(Exception):
    """A control request refused before it changed anything (carries the reason)."""

    def __init__(self, error: DblogError) -> None:
        super().__init__(str(error))
        self.error = error


def not_running() -> DblogError:
    return DblogError("it is between two runs (restarting or stopped): the request was not "
                      "queued", fix="send it again once dblog status shows the capture running")


class CommandChannel:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Command, Command | None]] = queue.SimpleQueue()
        self._waker: Callable[[], None] | None = None

    def set_waker(self, waker: Callable[[], None] | None) -> None:
        """What wakes the engine thread (None: nothing; the command waits for the poll)."""
        self._waker = waker

    def submit(self, command: Command, dropped: Command | None = None) -> None:
        """Queue ``command`` (any thread) and wake the engine thread; ``dropped`` is called
        instead when the run ends before the command ran."""
        self._queue.put((command, dropped))
        self.wake()

    def call(self, call: Callable[[], str], *, refuse: bool = False) -> Future[str]:
        """Run ``call`` on the engine thread; its result, or the error that rejected the
        request (:class:`Rejected`), resolves the future. Any other error resolves it too
        (a DblogError as itself, so a capture that is down is told from a refusal) and then
        stops the engine, as an error of the loop would. ``refuse``: fail at once."""
        result: Future[str] = Future()
        if refuse:  # between two runs: none would answer before the caller gives up
            result.set_exception(not_running())
            return result

        def run() -> None:
            try:
                result.set_result(call())
            except Rejected as rejected:
                result.set_exception(rejected.error)
            except BaseException as exc:
                result.set_exception(exc if isinstance(exc, DblogError) else DblogError(
                    f"the request was not stored: {exc}",
                    fix="the engine restarts from the committed state; send it again"))
                raise

        def dropped() -> None:
            if not result.done():
                result.set_exception(not_running())

        self.submit(run, dropped)
        return result

    def wake(self) -> None:
        waker = self._waker
        if waker is not None:
            waker()

    def apply(self) -> int:
        """Run every queued command (engine thread); return how many ran."""
        ran = 0
        for command, _ in self._taken():
            command()
            ran += 1
        return ran

    def drop_all(self) -> int:
        """Drop every queued command, telling each caller (the run ended); how many."""
        count = 0
        for _, dropped in self._taken():
            if dropped is not None:
                dropped()
            count += 1
        return count

    def _taken(self) -> Iterator[tuple[Command, Command | None]]:
        """The queued commands, each removed as it is taken, until the queue is empty."""
        while True:
            try:
                yield self._queue.get_nowait()
            except queue.Empty:
                return

    def empty(self) -> bool:
        return self._queue.empty()
