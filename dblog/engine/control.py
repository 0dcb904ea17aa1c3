"""Control of a running engine: the calls other threads make (dump requests, pause, resume,
cancel, knobs, stop, status) and the commands they queue for the engine thread.

:class:`EngineControl` is a part of :class:`dblog.engine.Engine`, kept in its own module.
Requests are queued as commands and carried out by the engine thread between loop turns; a
:class:`dblog.spi.WakeableLogReader` is woken so a command does not wait for the poll timeout.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from dblog.core import dumps as dumpops
from dblog.core.dumps import Dump, DumpState
from dblog.core.model import TableId
from dblog.engine.scheduler import ChunkScheduling
from dblog.errors import DblogError, DumpRequestError
from dblog.spi import WakeableLogReader

log = logging.getLogger("dblog.engine")


class EngineControl(ChunkScheduling):
    """Control calls (any thread) and the commands they queue (engine thread)."""

    running: threading.Event
    _stop: threading.Event
    _wakeable: WakeableLogReader | None

    def request_dump(
        self, tables: Sequence[str | TableId] | None = None, *, table: str | TableId | None = None,
        keys: Sequence[Sequence[Any]] | None = None, dump_id: str | None = None,
    ) -> Future[str]:
        """Queue a dump of ``tables`` (None: all captured tables) or of ``keys`` of ``table``.

        The future resolves to the dump id once the engine validated and stored the request,
        or raises :class:`DumpRequestError`. A given ``dump_id`` makes the request idempotent:
        a dump with that id already in the state is not queued again.
        """
        result: Future[str] = Future()
        self._command(lambda: self._accept_dump(result, tables, table, keys, dump_id))
        return result

    def set_dump_state(self, dump_id: str, state: DumpState) -> Future[str]:
        """Pause (PAUSED), resume (QUEUED) or cancel (CANCELLED) a dump, between chunks."""
        result: Future[str] = Future()
        self._command(lambda: self._change_dump(result, dump_id, state))
        return result

    def set_knobs(self, chunk_size: int | None = None, chunk_delay_s: float | None = None) -> None:
        if chunk_size is not None:
            if chunk_size < 1:
                raise DumpRequestError("chunk_size must be at least 1")
            self.knobs.chunk_size = chunk_size
        if chunk_delay_s is not None:
            self.knobs.chunk_delay_s = max(0.0, chunk_delay_s)

    def stop(self) -> None:
        self._stop.set()
        self._wake()

    def status(self) -> dict[str, Any]:
        state = self.delivery.state
        return {
            "running": self.running.is_set(),
            "committed_position": None if state.position is None else str(state.position),
            "committed_seq": state.seq,
            "emitted_seq": self.delivery.last_seq,
            "dumps": [dumpops.dump_to_json(d) for d in self.live.dumps if not d.internal],
        }

    def _command(self, command: Callable[[], None]) -> None:
        self.knobs.commands.put(command)
        self._wake()

    def _wake(self) -> None:
        """Cut short a poll of an idle log, so a command acts at once (when the reader can)."""
        reader = self._wakeable
        if reader is not None:
            reader.wakeup()

    def _apply_commands(self) -> None:
        while True:
            try:
                command = self.knobs.commands.get_nowait()
            except queue.Empty:
                return
            command()

    # -- commands (engine thread) ----------------------------------------------------------

    def _accept_dump(
        self, result: Future[str], tables: Sequence[str | TableId] | None,
        table: str | TableId | None, keys: Sequence[Sequence[Any]] | None,
        dump_id: str | None = None,
    ) -> None:
        if dump_id is not None and self.live.get(dump_id) is not None:
            result.set_result(dump_id)
            return
        try:
            dump = self._build_dump(tables, table, keys)
        except DblogError as exc:
            result.set_exception(exc)
            return
        if dump_id is not None:
            dump = replace(dump, id=dump_id)
        self.delivery.commit()
        self.live = self.live.add(dump)
        self.delivery.update_committed(lambda s: replace(s, dumps=s.dumps.add(dump)))
        log.info("dump %s queued: %s", dump.id, ", ".join(str(t.table) for t in dump.tables))
        result.set_result(dump.id)

    def _build_dump(
        self, tables: Sequence[str | TableId] | None, table: str | TableId | None,
        keys: Sequence[Sequence[Any]] | None,
    ) -> Dump:
        return dumpops.validated_dump(self._chunks, self._table_info, tables, table, keys)

    def _change_dump(self, result: Future[str], dump_id: str, state: DumpState) -> None:
        dump = self.live.get(dump_id)
        if dump is None:
            result.set_exception(DumpRequestError(f"no dump with id {dump_id!r}"))
            return
        if dump.state in (DumpState.DONE, DumpState.CANCELLED, DumpState.FAILED):
            result.set_exception(DumpRequestError(f"dump {dump_id} is already {dump.state.value}"))
            return
        if self._open is not None and self._open.plan.dump_id == dump_id:
            self._open = None  # the window's rows are never emitted; progress stays before it
        self._drop_jobs(dump_id)
        self._set_live(dumpops.set_state(dump, state))
        result.set_result(dump_id)
