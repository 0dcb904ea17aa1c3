"""The embedded API: build a pipeline from parts (or a config file) and run it in-process.

::

    from dblog import Pipeline
    from dblog.connectors.postgres import PostgresConnector
    from dblog.outputs.jsonl import JsonlOutput

    pipeline = Pipeline(PostgresConnector({"dsn": "...", "tables": ["public.*"]}, "demo"),
                        [JsonlOutput({"path": "changes.jsonl"})], state_path="state.json")
    pipeline.start()
    pipeline.dump(["public.orders"])
    ...
    pipeline.stop()

Transient failures (source or output unavailable) restart the engine from the committed state
with backoff; fatal ones stop the pipeline and are raised by :meth:`Pipeline.join`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from dblog.app.config import PipelineConfig, load_config
from dblog.core.dumps import DumpState
from dblog.engine import Engine, EngineSettings, PhaseHooks
from dblog.errors import DblogError
from dblog.spi import LeaderElection, Output, SourceConnector, StateStore
from dblog.state import FileStateStore

log = logging.getLogger("dblog.app.pipeline")


class Pipeline:
    def __init__(
        self,
        source: SourceConnector,
        outputs: Sequence[Output],
        *,
        state: StateStore | None = None,
        state_path: str = "dblog-state.json",
        settings: EngineSettings | None = None,
        hooks: PhaseHooks | None = None,
        max_restarts: int = 20,
        election: LeaderElection | None = None,
    ) -> None:
        self.engine = Engine(source, outputs, state or FileStateStore(state_path), settings,
                             hooks=hooks, election=election)
        self.max_restarts = max_restarts
        self.restarts = 0
        """How often a transient failure restarted the engine from the committed state."""
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._stopping = threading.Event()

    @classmethod
    def from_config(cls, config: PipelineConfig | str, *, state: StateStore | None = None,
                    election: LeaderElection | None = None,
                    max_restarts: int = 20) -> Pipeline:
        from dblog.app.plugins import build_connector, build_output

        cfg = load_config(config) if isinstance(config, str) else config
        source = build_connector(cfg.source, cfg.name)
        outputs = [build_output(raw, i) for i, raw in enumerate(cfg.outputs)]
        settings = EngineSettings(**cfg.engine.model_dump(),
                                  initial_dumps=tuple(d.tables for d in cfg.initial_dumps))
        return cls(source, outputs, state=state, state_path=cfg.state.path, settings=settings,
                   election=election, max_restarts=max_restarts)

    # -- lifecycle --------------------------------------------------------------------------

    def run(self) -> None:
        """Run in this thread until :meth:`stop` or a fatal error."""
        restarts, delay = 0, 1.0
        while not self._stopping.is_set():
            started = time.monotonic()
            try:
                self.engine.run()
                return
            except DblogError as exc:
                if time.monotonic() - started > 300:  # a long healthy run resets the budget
                    restarts, delay = 0, 1.0
                if not exc.retryable or restarts >= self.max_restarts:
                    raise
                restarts += 1
                self.restarts += 1
                log.warning("transient failure, restarting from the committed state in %.0fs "
                            "(%d/%d): %s", delay, restarts, self.max_restarts, exc)
                if self._stopping.wait(delay):
                    return
                delay = min(delay * 2, 30.0)

    def start(self, wait_ready: float = 60.0) -> Pipeline:
        """Run in a background thread; return once the engine is streaming."""
        def target() -> None:
            try:
                self.run()
            except BaseException as exc:  # surfaced by join()
                self._error = exc
                log.error("pipeline stopped: %s", exc)

        self._thread = threading.Thread(target=target, name="dblog-engine", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + wait_ready
        while not self.engine.running.wait(0.05):
            if not self._thread.is_alive() or time.monotonic() > deadline:
                break
        if self._error is not None:
            raise self._error
        return self

    def request_stop(self) -> None:
        """Ask the pipeline to stop after the current batch (safe from signal handlers)."""
        self._stopping.set()
        self.engine.stop()

    def stop(self, timeout: float = 60.0) -> None:
        self.request_stop()
        self.join(timeout)

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
        if self._error is not None:
            raise self._error

    # -- dumps and knobs ------------------------------------------------------------------

    def _wait(self, future: Future[str], timeout: float) -> str:
        """The command's result; raises the pipeline's own error if it stopped meanwhile."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return future.result(0.1)
            except FutureTimeout:
                if self._error is not None:
                    raise self._error from None
                if time.monotonic() > deadline:
                    raise
                if self._thread is not None and not self._thread.is_alive():
                    raise DblogError("the pipeline is not running") from None

    def dump(self, tables: Sequence[str] | None = None, timeout: float = 60.0) -> str:
        """Queue a dump of ``tables`` (None: all captured tables); return its id."""
        return self._wait(self.engine.request_dump(tables), timeout)

    def dump_keys(self, table: str, keys: Sequence[Sequence[Any]], timeout: float = 60.0) -> str:
        return self._wait(self.engine.request_dump(table=table, keys=keys), timeout)

    def pause(self, dump_id: str) -> None:
        self._wait(self.engine.set_dump_state(dump_id, DumpState.PAUSED), 60)

    def resume(self, dump_id: str) -> None:
        self._wait(self.engine.set_dump_state(dump_id, DumpState.QUEUED), 60)

    def cancel(self, dump_id: str) -> None:
        self._wait(self.engine.set_dump_state(dump_id, DumpState.CANCELLED), 60)

    def set(self, chunk_size: int | None = None, chunk_delay_s: float | None = None) -> None:
        self.engine.set_knobs(chunk_size, chunk_delay_s)

    def status(self) -> dict[str, Any]:
        """The engine's status; raises the error that stopped the pipeline, if one did."""
        if self._error is not None:
            raise self._error
        return self.engine.status()

    def dump_status(self, dump_id: str) -> dict[str, Any] | None:
        return next((d for d in self.status()["dumps"] if d["id"] == dump_id), None)
