"""One HA instance: a candidate that, when elected, runs the pipeline from the committed state.

``dblog run`` with ``state.type: zookeeper`` runs :meth:`HaInstance.run`: campaign; when
elected, build a fresh pipeline (its engine carries this term's epoch), serve queued dump
requests while it runs; when the lease is suspended the engine stops emitting and the pipeline
is started again if the same session comes back; when the session is lost the term ends and the
instance campaigns again. Transient failures restart the pipeline with backoff (only while the
lease holds); fatal ones stop the instance after it resigned, so a standby takes over.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from kazoo.client import KazooClient

from dblog.app.config import PipelineConfig
from dblog.app.pipeline import Pipeline
from dblog.core.dumprequests import asked
from dblog.core.dumps import DumpState
from dblog.errors import (
    DblogError,
    DumpIdConflict,
    DumpRequestError,
    FencedError,
    RetryableStateError,
)
from dblog.ha import requests
from dblog.ha.election import ZooKeeperElection
from dblog.ha.zk import ZkPaths, ZooKeeperStateStore, connect
from dblog.runtime.clock import SystemClock
from dblog.runtime.retry import Backoff
from dblog.spi import Clock, DumpRequest
from dblog.spi.metrics import Counters
from dblog.state import state_from_json

log = logging.getLogger("dblog.ha")


class HaInstance:
    def __init__(self, config: PipelineConfig, *, clock: Clock | None = None) -> None:
        state = config.state
        assert state.hosts is not None  # validated by StateConfig
        self.config = config
        self.clock = clock or SystemClock()
        self.client = self._connect(state.hosts, state.session_timeout_s,
                                    state.connect_timeout_s)
        self.paths = ZkPaths.of(state.root, config.name)
        self.election = ZooKeeperElection(self.client, self.paths, self.clock,
                                          session_timeout_s=state.session_timeout_s,
                                          instance_id=state.instance_id)
        self.store = ZooKeeperStateStore(self.client, self.paths, fenced=True)
        self.pipeline: Pipeline | None = None
        self.terms = 0
        self.restarts = 0
        """Pipelines started again after a transient failure, over every term (each run is
        a fresh Pipeline, whose own count stays 0)."""
        self.metrics = Counters()
        """The engine's counters over every term and restart, so the exported totals never
        fall back to 0 while this process runs."""
        self.in_term = False
        """Within a term (between election and resignation), the pipeline running or not."""
        self._stop = threading.Event()

    def _connect(self, hosts: str, session_s: float, timeout_s: float) -> KazooClient:
        """Connect, retrying while ZooKeeper is unavailable (it may start after dblog)."""
        backoff = Backoff(self.clock, 1.0, 30.0)
        while True:
            try:
                return connect(hosts, session_s, timeout_s)
            except RetryableStateError as exc:
                delay = backoff.next()
                log.warning("%s; retrying in %.0fs", exc.message, delay)
                self.clock.sleep(delay)

    def request_stop(self) -> None:
        """Stop after the current batch (safe from signal handlers)."""
        self._stop.set()
        pipeline = self.pipeline
        if pipeline is not None:
            pipeline.request_stop()

    # -- the control contract (dblog.spi.Control) -------------------------------------------

    def request_dump(self, request: DumpRequest, timeout: float = 60.0) -> str:
        """While leading: hand the request to the engine, which validates it and stores the
        dump in the state before answering (a rejection is raised here, not found later).
        A standby queues it durably through ZooKeeper; the leader serves it."""
        pipeline = self.pipeline
        if pipeline is not None and pipeline.is_running():
            return pipeline.request_dump(request, timeout)
        return self._queue(request)

    def _queue(self, request: DumpRequest) -> str:
        """Queue ``request`` in ZooKeeper under its own ``dump_id`` (or a new id); a request
        whose id is queued already is not queued again (a client's retry)."""
        if request.dump_id is not None:
            held = self._asked_under(request.dump_id)
            if held is not None:
                if held not in ("", _asks(request)):
                    raise DumpIdConflict(request.dump_id, held)
                return request.dump_id
        if request.ranged:
            return requests.queue_range_dump(self.client, self.paths, request.table,
                                             _listed(request.key_from), _listed(request.key_to),
                                             dump_id=request.dump_id)
        return requests.queue_dump(
            self.client, self.paths, None if request.tables is None else list(request.tables),
            table=request.table, dump_id=request.dump_id,
            keys=None if request.keys is None else [list(k) for k in request.keys])

    def _asked_under(self, dump_id: str) -> str | None:
        """The request queued or stored under ``dump_id`` (None: none; "" for a dump stored
        before requests were kept, which any request matches)."""
        for _, queued in requests.pending(self.client, self.paths):
            if queued["id"] == dump_id:
                return _asks(requests.dump_request(queued))
        stored = self.store.load()
        dump = None if stored is None else state_from_json(stored.data).dumps.get(dump_id)
        return None if dump is None else dump.asked or ""

    def request_range_dump(self, table: str, key_from: list[Any] | None,
                           key_to: list[Any] | None, dump_id: str | None = None,
                           timeout: float = 60.0) -> str:
        """A dump of a key range of ``table`` (both ends included), as :meth:`request_dump`
        (the API's KeyRangeControl)."""
        return self.request_dump(DumpRequest.key_range(table, key_from, key_to, dump_id),
                                 timeout)

    def set_dump_state(self, dump_id: str, state: DumpState, timeout: float = 60.0) -> None:
        self._leading().set_dump_state(dump_id, state, timeout)

    def set_knobs(self, chunk_size: int | None = None,
                  chunk_delay_s: float | None = None) -> None:
        self._leading().set_knobs(chunk_size, chunk_delay_s)

    def status(self) -> dict[str, Any]:
        """The pipeline's status while it exists; between two of a term's runs (the backoff
        after a transient failure) a leader that does not run; else a standby."""
        pipeline = self.pipeline
        counts = {"terms": self.terms, "restarts": self.restarts}
        if pipeline is not None:
            return {**pipeline.status(), "role": "leader", **counts}
        role = "leader" if self._holds_lease() else "standby"
        return {"running": False, "role": role, **counts}

    def _holds_lease(self) -> bool:
        return self.in_term and self.election.lease.held()

    def dump(self, tables: list[str] | None = None) -> str:
        return self.request_dump(DumpRequest(tables=tables))

    def _leading(self) -> Pipeline:
        pipeline = self.pipeline
        if pipeline is None and self._holds_lease():
            raise DblogError("this instance leads but its capture is restarting after a "
                             "transient failure", fix="try again in a few seconds")
        if pipeline is None:
            raise DumpRequestError("this instance is a standby: send the request to the leader",
                                   fix="dblog status shows which instance leads")
        return pipeline

    def run(self) -> None:
        """Campaign and lead until :meth:`request_stop` or a fatal error."""
        try:
            while not self._stop.is_set():
                epoch = self.election.campaign(self._stop)
                if epoch is None:
                    break
                self.terms += 1
                self._lead(epoch)
        finally:
            self.election.resign()
            self.election.close()
            self.client.stop()
            self.client.close()

    def _lead(self, epoch: int) -> None:
        self.in_term = True
        self.metrics.forget_lag()  # what an earlier term read says nothing of this one's lag
        try:
            self._lead_while_held(epoch)
        finally:
            self.in_term = False
        self.election.resign()
        log.info("leadership term with epoch %d is over", epoch)

    def _lead_while_held(self, epoch: int) -> None:
        """Run the pipeline while the lease holds, again after each transient failure."""
        backoff = Backoff(self.clock, 1.0, 10.0)
        lease = self.election.lease
        while not self._stop.is_set() and lease.held():
            if not self.election.is_leader():
                self._stop.wait(0.05)  # suspended or not renewed yet: emit nothing, wait
                continue
            try:
                self._run_term(Pipeline.from_config(
                    self.config, state=self.store, election=self.election, max_restarts=0,
                    metrics=self.metrics))
                backoff.reset()
            except FencedError as exc:
                log.warning("epoch %d fenced: %s", epoch, exc)
                return
            except DblogError as exc:
                if not exc.retryable:
                    log.error("fatal error, giving up leadership: %s", exc)
                    raise
                delay = backoff.next()
                self.restarts += 1
                log.warning("transient failure, restarting from the committed state in %.0fs "
                            "(restart %d): %s", delay, self.restarts, exc)
                self._stop.wait(delay)

    def _run_term(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        done = threading.Event()
        pump = threading.Thread(target=self._serve_requests, args=(pipeline, done),
                                name="dblog-requests", daemon=True)
        pump.start()
        try:
            if not self._stop.is_set():
                pipeline.run()
        finally:
            done.set()
            pump.join(10)
            self.pipeline = None

    def _serve_requests(self, pipeline: Pipeline, done: threading.Event) -> None:
        """Move queued dump requests into the state while this term's engine runs."""
        def submit(request: dict[str, Any]) -> Future[str]:
            return pipeline.submit_dump(requests.dump_request(request))

        while not done.wait(0.5):
            if not pipeline.is_running() or not self.election.is_leader():
                continue
            try:
                requests.consume(self.client, self.paths, submit, timeout=30.0)
            except (DblogError, FutureTimeout) as exc:
                log.warning("serving dump requests: %s", exc or type(exc).__name__)


def _asks(request: DumpRequest) -> str:
    """What ``request`` asks for, as the engine keeps it under a dump id."""
    return asked(request.tables, request.table, request.keys, ranged=request.ranged,
                 key_from=request.key_from, key_to=request.key_to)


def _listed(key: Sequence[Any] | None) -> list[Any] | None:
    return None if key is None else list(key)
