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
from dblog.runtime.retry import Backoff
from dblog.spi import DumpRequest, LeaderElection, Output, SourceConnector, StateStore
from dblog.spi.metrics import MetricsSink
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
        metrics: MetricsSink | None = None,
    ) -> None:
        self.engine = Engine(source, outputs, state or FileStateStore(state_path), settings,
                             hooks=hooks, election=election, metrics=metrics)
        self.max_restarts = max_restarts
        self.restarts = 0
        """How often a transient failure restarted the engine from the committed state."""
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._stopping = threading.Event()

    @classmethod
    def from_config(cls, config: PipelineConfig | str, *, state: StateStore | None = None,
                    election: LeaderElection | None = None, max_restarts: int = 20,
                    metrics: MetricsSink | None = None) -> Pipeline:
        from dblog.app.plugins import build_connector, build_output

        cfg = load_config(config) if isinstance(config, str) else config
        source = build_connector(cfg.source, cfg.name)
        outputs = [build_output(raw, i) for i, raw in enumerate(cfg.outputs)]
        initial = tuple(None if d.tables is None else tuple(d.tables) for d in cfg.initial_dumps)
        settings = cfg.engine.model_copy(update={"initial_dumps": initial})
        return cls(source, outputs, state=state, state_path=cfg.state.path, settings=settings,
                   election=election, max_restarts=max_restarts, metrics=metrics)

    # -- lifecycle --------------------------------------------------------------------------

    def run(self) -> None:
        """Run in this thread until :meth:`stop` or a fatal error."""
        backoff = Backoff(self.engine.clock, 1.0, 30.0, reset_after_s=300)
        while not self._stopping.is_set():
            backoff.started()
            try:
                self.engine.run()
                return
            except DblogError as exc:
                backoff.healthy()  # a long healthy run resets the budget
                if not exc.retryable or backoff.attempts >= self.max_restarts:
                    raise
                delay = backoff.next()
                self.restarts += 1
                log.warning("transient failure, restarting from the committed state in %.0fs "
                            "(%d/%d): %s", delay, backoff.attempts, self.max_restarts, exc)
                if self._stopping.wait(delay):
                    return

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

    # -- the control contract (dblog.spi.Control) -------------------------------------------

    def submit_dump(self, request: DumpRequest) -> Future[str]:
        """Queue ``request`` without waiting; the future resolves to the dump id once the
        engine validated and stored it (or raises DumpRequestError)."""
        if request.ranged:
            return self.engine.request_range_dump(
                request.table, request.key_from,
                request.key_to, dump_id=request.dump_id)
        return self.engine.request_dump(request.tables, table=request.table, keys=request.keys,
                                        dump_id=request.dump_id)

    def request_dump(self, request: DumpRequest, timeout: float = 60.0) -> str:
        return self._wait(self.submit_dump(request), timeout)

    def request_range_dump(self, table: str, key_from: list[Any] | None,
                           key_to: list[Any] | None, dump_id: str | None = None,
                           timeout: float = 60.0) -> str:
        """Queue a dump of the keys of ``table`` from ``key_from`` to ``key_to``, both
        included (None: that end is open); return its id (the API's KeyRangeControl)."""
        return self.request_dump(DumpRequest.key_range(table, key_from, key_to, dump_id),
                                 timeout)

    def set_dump_state(self, dump_id: str, state: DumpState, timeout: float = 60.0) -> None:
        self._wait(self.engine.set_dump_state(dump_id, state), timeout)

    def set_knobs(self, chunk_size: int | None = None,
                  chunk_delay_s: float | None = None) -> None:
        self.engine.set_knobs(chunk_size, chunk_delay_s)

    def is_running(self) -> bool:
        """Whether the engine is streaming now (between start-up and stop)."""
        return self.engine.running.is_set()

    # -- shorthands for embedded use --------------------------------------------------------

    def dump(self, tables: Sequence[str] | None = None, timeout: float = 60.0) -> str:
        """Queue a dump of ``tables`` (None: all captured tables); return its id."""
        return self.request_dump(DumpRequest(tables=tables), timeout)

    def dump_keys(self, table: str, keys: Sequence[Sequence[Any]], timeout: float = 60.0) -> str:
        return self.request_dump(DumpRequest(table=table, keys=keys), timeout)

    def pause(self, dump_id: str) -> None:
        self.set_dump_state(dump_id, DumpState.PAUSED)

    def resume(self, dump_id: str) -> None:
        self.set_dump_state(dump_id, DumpState.QUEUED)

    def cancel(self, dump_id: str) -> None:
        self.set_dump_state(dump_id, DumpState.CANCELLED)

    def set(self, chunk_size: int | None = None, chunk_delay_s: float | None = None) -> None:
        self.set_knobs(chunk_size, chunk_delay_s)

    def status(self) -> dict[str, Any]:
        """The engine's status; raises the error that stopped the pipeline, if one did."""
        if self._error is not None:
            raise self._error
        return {**self.engine.status(), "restarts": self.restarts}

    def dump_status(self, dump_id: str) -> dict[str, Any] | None:
        return next((d for d in self.status()["dumps"] if d["id"] == dump_id), None)
