"""What the dump scheduler (:mod:`dblog.engine.scheduler`) works with besides the source: the
delivery it emits into, its open chunk, and the warning for a table a dump leaves out."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from dblog.core.acks import PipelineState
from dblog.core.dumps import ChunkPlan
from dblog.core.model import ChangeEvent
from dblog.core.window import ChunkWindow
from dblog.engine.jobs import ChunkJob
from dblog.errors import DblogError

log = logging.getLogger("dblog.engine")


class Outlet(Protocol):
    """What the scheduler needs from delivery (:class:`dblog.engine.delivery.Delivery`)."""

    def emit_all(self, events: list[ChangeEvent]) -> None: ...

    def deliver(self) -> None: ...

    def commit(self) -> PipelineState: ...

    def update_committed(self, change: Callable[[PipelineState], PipelineState]) -> None: ...


def log_skipped(table: object, error: DblogError) -> None:
    """A table left out of a dump of every captured table (or of initial_dumps, when asked)."""
    log.warning("not dumping %s: %s", table, error.message)


@dataclass
class OpenChunk:
    plan: ChunkPlan
    window: ChunkWindow
    selected: int
    limit: int
    job: ChunkJob
    idle_s: float = 0.0
