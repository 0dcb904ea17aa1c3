"""What the HTTP routes do, on the control contract only (no web framework here): read the
status, turn dumps into views, check requests, and classify the answers.

A standby answers control requests with :class:`NotLeader` (where the leader is); engine
rejections (:class:`~dblog.errors.DumpRequestError`) become 4xx answers naming the problem.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Protocol, runtime_checkable

from dblog.api.discovery import Directory
from dblog.api.models import DumpCreate, DumpView, KnobsUpdate, LeaderView, StatusView
from dblog.api.progress import RateTracker, dump_view, table_states
from dblog.core.dumps import DumpState
from dblog.errors import DblogError, DumpIdConflict, DumpRequestError
from dblog.spi import Control, DumpRequest

STATUS_TTL_S = 0.2
"""Views are built from a status read at most this long ago: many clients polling at once
cost the engine one status read per interval, not one each."""

ACTIONS = {"pause": DumpState.PAUSED, "resume": DumpState.QUEUED, "cancel": DumpState.CANCELLED}
FINISHED = frozenset({"done", "cancelled", "failed"})


@runtime_checkable
class KeyRangeControl(Protocol):
    """A control that can dump a key range of a table (both ends included)."""

    def request_range_dump(self, table: str, key_from: list[Any] | None,
                           key_to: list[Any] | None, dump_id: str | None,
                           timeout: float) -> str: ...


class ApiError(Exception):
    """An answer other than success: HTTP ``status`` with a message (and the fix)."""

    def __init__(self, status: int, detail: str, fix: str | None = None,
                 leader: LeaderView | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.fix, self.leader = status, detail, fix, leader


class Service:
    def __init__(self, control: Control, directory: Directory | None = None, *,
                 timeout: float = 15.0, lag_bytes: Callable[[], int | None] | None = None,
                 instance: str | None = None) -> None:
        self.control, self.directory, self.timeout = control, directory, timeout
        self.lag_bytes, self.instance = lag_bytes, instance
        self.rates = RateTracker()
        self._cached: tuple[float, dict[str, Any]] | None = None
        self._lock = threading.Lock()

    # -- reading -------------------------------------------------------------------------

    def status(self, fresh: bool = False) -> dict[str, Any]:
        """``Control.status()``, at most STATUS_TTL_S old unless ``fresh``; 503 when the
        capture stopped with an error, whatever its class (a bug included)."""
        with self._lock:
            cached = self._cached
            if not fresh and cached is not None and time.monotonic() - cached[0] < STATUS_TTL_S:
                return cached[1]
            try:
                status = self.control.status()
            except Exception as exc:  # whatever stopped the capture: 503, not a crash
                raise _stopped(exc) from exc
            self._cached = (time.monotonic(), status)
            return status

    def leader(self) -> LeaderView | None:
        if self.directory is None:
            return None
        try:
            info = self.directory.leader()
        except DblogError:
            return None
        return None if info is None else LeaderView(
            instance=info.get("instance"), epoch=info.get("epoch"), since=info.get("since"),
            api=info.get("api"))

    def status_view(self) -> StatusView:
        status = self.status()
        role = str(status.get("role", "single"))
        leader = self.leader()
        metrics = status.get("metrics") or {}
        knobs = status.get("knobs")
        return StatusView(
            running=bool(status.get("running")), role=role, instance=self.instance,
            leader=leader, epoch=None if leader is None else leader.epoch,
            committed_position=status.get("committed_position"),
            committed_seq=status.get("committed_seq"), emitted_seq=status.get("emitted_seq"),
            lag_s=metrics.get("lag_s") if status.get("running") else None,
            lag_bytes=self.lag_bytes() if self.lag_bytes is not None and role != "standby"
            else None,
            knobs=knobs, tables=table_states(status), dumps=self.dumps(status))

    def dumps(self, status: dict[str, Any] | None = None) -> list[DumpView]:
        status = self.status() if status is None else status
        return [dump_view(d, self.rates) for d in status.get("dumps", [])
                if not d.get("internal")]

    def dump(self, dump_id: str) -> DumpView:
        found = next((d for d in self.dumps(self._leading()) if d.id == dump_id), None)
        if found is None:
            raise ApiError(404, f"no dump with id {dump_id!r}",
                           "GET /api/v1/dumps lists the dumps this instance knows")
        return found

    def _leading(self) -> dict[str, Any]:
        """The status, if this instance may serve control requests; else NotLeader (421)."""
        status = self.status()
        if status.get("role") == "standby":
            leader = self.leader()
            where = "no instance leads right now" if leader is None or leader.api is None \
                else f"the leader is {leader.instance} at {leader.api}"
            raise ApiError(421, f"this instance is a standby: {where}",
                           "send control requests to the leader", leader=leader)
        return status

    def list_dumps(self) -> list[DumpView]:
        return self.dumps(self._leading())

    # -- changing ------------------------------------------------------------------------

    def create(self, body: DumpCreate) -> tuple[DumpView, bool]:
        """The dump the request made, and whether the engine has stored it already (201);
        False (202): it was queued durably for an engine that is not streaming yet (an HA
        leader starting its term), which stores it under this id when it is."""
        status = self._leading()
        if body.kind == "range":
            dump_id = self._range(body, status)
        else:
            request = DumpRequest(tables=body.tables, table=body.table,
                                  keys=body.keys, dump_id=body.dump_id)
            dump_id = str(self._call(
                lambda: self.control.request_dump(request, self.timeout), 422))
        self.status(fresh=True)
        try:
            return self.dump(dump_id), True
        except ApiError as exc:
            if exc.status != 404:
                raise
        return _queued_view(dump_id, body), False

    def _range(self, body: DumpCreate, status: dict[str, Any]) -> str:
        assert body.table is not None
        known = status.get("tables")
        if known is not None and body.table not in known:
            raise ApiError(422, f"table {body.table} is not captured by this pipeline",
                           f"captured tables: {', '.join(known) or 'none'}")
        control = self.control
        if not isinstance(control, KeyRangeControl):
            raise ApiError(501, "key-range dumps are not supported by this engine yet",
                           "dump the table, or a list of its keys (keys: [[...], ...])")
        table = body.table
        return str(self._call(lambda: control.request_range_dump(
            table, body.key_from, body.key_to, body.dump_id, self.timeout), 422))

    def change(self, dump_id: str, action: str) -> DumpView:
        current = self.dump(dump_id)  # 404 for an unknown id, 421 on a standby
        if current.state in FINISHED:
            raise ApiError(409, f"dump {dump_id} is already {current.state}")
        state = ACTIONS[action]
        self._call(lambda: self.control.set_dump_state(dump_id, state, self.timeout), 409)
        return self.dump_fresh(dump_id)

    def set_knobs(self, body: KnobsUpdate) -> dict[str, Any]:
        self._leading()
        self._call(lambda: self.control.set_knobs(body.chunk_size, body.chunk_delay_s), 422)
        knobs = self.status(fresh=True).get("knobs")
        return dict(knobs) if knobs else body.model_dump(exclude_none=True)

    def dump_fresh(self, dump_id: str) -> DumpView:
        self.status(fresh=True)
        return self.dump(dump_id)

    def _call(self, action: Callable[[], Any], rejected: int) -> Any:
        """Run a control call; its rejection is a ``rejected`` answer, an engine that does
        not answer in time 504, a capture that is down 503."""
        try:
            return action()
        except DumpIdConflict as exc:
            raise ApiError(409, exc.message, exc.fix) from exc
        except DumpRequestError as exc:
            raise ApiError(rejected, exc.message, exc.fix) from exc
        except FutureTimeout as exc:
            raise ApiError(504, f"the engine did not answer within {self.timeout:.0f}s",
                           "the capture may be restarting; try again") from exc
        except DblogError as exc:
            raise ApiError(503, f"the capture is not running: {exc.message}", exc.fix) from exc


def _queued_view(dump_id: str, body: DumpCreate) -> DumpView:
    """The view of a dump that is queued but not yet in the engine's status."""
    key_range = {"from": body.key_from, "to": body.key_to} if body.kind == "range" else None
    return DumpView(id=dump_id, state="queued", kind=body.kind, rows=0, chunks=0,
                    estimated_total=0, tables=[], key_range=key_range)


def _stopped(exc: Exception) -> ApiError:
    """The 503 answer for the error that stopped the capture (``Control.status()`` raises
    it): a DblogError with its own fix; anything else, named, with the log as the fix."""
    if isinstance(exc, DblogError):
        return ApiError(503, f"the capture is not running: {exc.message}", exc.fix)
    return ApiError(503, f"the capture stopped on an unexpected error: "
                         f"{type(exc).__name__}: {exc}",
                    "the instance's log has the traceback; restart it with dblog run, and "
                    "report the error if it happens again")
