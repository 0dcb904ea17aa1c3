"""Control of a running capture: the contract the embedded :class:`dblog.Pipeline` and the HA
instance both implement, and that the CLI and the HTTP API sit on.

Calls may come from any thread. Requests are validated before they are accepted; a rejected
request raises :class:`dblog.errors.DumpRequestError` naming the problem.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from dblog.core.dumps import DumpState


@dataclass(frozen=True)
class DumpRequest:
    """A dump of ``tables`` (None: every captured table), or of ``keys`` of ``table``, or,
    with ``ranged``, of the keys of ``table`` from ``key_from`` to ``key_to`` (both included;
    None: that end is open). A given ``dump_id`` makes the request idempotent."""

    tables: Sequence[str] | None = None
    table: str | None = None
    keys: Sequence[Sequence[Any]] | None = None
    dump_id: str | None = None
    key_from: Sequence[Any] | None = None
    key_to: Sequence[Any] | None = None
    ranged: bool = False

    @classmethod
    def key_range(cls, table: str, key_from: Sequence[Any] | None,
                  key_to: Sequence[Any] | None, dump_id: str | None = None) -> DumpRequest:
        return cls(table=table, key_from=key_from, key_to=key_to, dump_id=dump_id, ranged=True)


class Control(Protocol):
    def request_dump(self, request: DumpRequest, timeout: float = 60.0) -> str:
        """Queue a dump; return its id once the engine validated and stored it."""
        ...

    def set_dump_state(self, dump_id: str, state: DumpState, timeout: float = 60.0) -> None:
        """Pause (PAUSED), resume (QUEUED) or cancel (CANCELLED) a dump, between chunks."""

    def set_knobs(self, chunk_size: int | None = None,
                  chunk_delay_s: float | None = None) -> None: ...

    def status(self) -> dict[str, Any]:
        """Whether the capture runs, its committed position and seq, and every dump."""
        ...
