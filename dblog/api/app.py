"""The FastAPI application: routes over :class:`~dblog.api.service.Service`, bearer-token
authentication, error answers, the status page and the Prometheus endpoint."""

from __future__ import annotations

import hmac
from enum import Enum
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from dblog.api.models import DumpCreate, DumpView, ErrorView, Health, KnobsUpdate, StatusView
from dblog.api.page import STATUS_PAGE
from dblog.api.service import ApiError, Service

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorView, "description": text} for code, text in (
        (401, "missing or wrong bearer token"), (404, "no such dump"),
        (409, "the dump cannot change state"), (421, "this instance is a standby"),
        (422, "the request is malformed or the engine refused it"),
        (503, "the capture is not running"), (504, "the engine did not answer in time"))}


class Action(str, Enum):
    pause = "pause"
    resume = "resume"
    cancel = "cancel"


_BEARER = HTTPBearer(auto_error=False, description="the token from api.token_env")


def _auth(token: str | None) -> Any:
    def check(credentials: Annotated[HTTPAuthorizationCredentials | None,
                                     Depends(_BEARER)]) -> None:
        if token is None:
            return
        given = "" if credentials is None else credentials.credentials
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise ApiError(401, "missing or wrong bearer token" if given else
                           "this API needs a bearer token", "send Authorization: Bearer <token>")

    return check


def _api_routes(service: Service) -> APIRouter:
    api = APIRouter(prefix="/api/v1", responses=ERRORS)

    @api.get("/status", response_model=StatusView)
    def status() -> StatusView:
        """Role, leader, epoch, committed position, lag, tables and dumps."""
        return service.status_view()

    @api.get("/dumps", response_model=list[DumpView])
    def list_dumps() -> list[DumpView]:
        return service.list_dumps()

    @api.post("/dumps", response_model=DumpView, status_code=201, responses={202: {
        "model": DumpView, "description": "queued for an engine that is starting"}})
    def create_dump(body: DumpCreate, response: Response) -> DumpView:
        """Queue a dump of tables, of a list of keys of a table, or of a key range: 201 with
        the stored dump, or 202 with ``state: queued`` when the engine is not streaming yet
        (an HA leader starting its term): the dump appears under this id once it is."""
        view, stored = service.create(body)
        if not stored:
            response.status_code = 202
        return view

    @api.get("/dumps/{dump_id}", response_model=DumpView)
    def get_dump(dump_id: str) -> DumpView:
        return service.dump(dump_id)

    @api.post("/dumps/{dump_id}/{action}", response_model=DumpView)
    def change_dump(dump_id: str, action: Action) -> DumpView:
        """Pause, resume or cancel a dump (between chunks)."""
        return service.change(dump_id, action.value)

    @api.patch("/knobs")
    def set_knobs(body: KnobsUpdate) -> dict[str, Any]:
        """Change the chunk size and the delay between chunks of the running engine."""
        return service.set_knobs(body)

    return api


def _health_routes(app: FastAPI, service: Service) -> None:
    @app.get("/livez", response_model=Health, tags=["health"])
    def livez() -> Health:
        """The process answers."""
        return Health(ok=True)

    @app.get("/readyz", response_model=Health, tags=["health"],
             responses={503: {"model": Health, "description": "not leading or not running"}})
    def readyz(response: Response) -> Health:
        """Ready: this instance leads and its capture runs."""
        try:
            status = service.status()
        except ApiError as exc:
            response.status_code = 503
            return Health(ok=False, detail=exc.detail)
        role = str(status.get("role", "single"))
        ok = bool(status.get("running")) and role != "standby"
        response.status_code = 200 if ok else 503
        return Health(ok=ok, role=role, detail=None if ok else
                      ("standby" if role == "standby" else "the capture is not running"))


def _error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    def api_error(_request: Request, exc: ApiError) -> JSONResponse:
        body = ErrorView(detail=exc.detail, fix=exc.fix, leader=exc.leader)
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
        if exc.leader is not None and exc.leader.api:
            headers["X-Dblog-Leader"] = exc.leader.api
        return JSONResponse(body.model_dump(exclude_none=True), exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {_message(e)}"
            for e in exc.errors())
        return JSONResponse({"detail": problems, "errors": _plain(exc.errors())}, 422)


def _message(error: Any) -> str:
    """A validation error's words; a table name that is not ``schema.table`` is named with
    the form, not with the pattern's regular expression."""
    loc = [p for p in error["loc"] if p != "body"]
    if error["type"] == "string_pattern_mismatch" and loc and loc[0] in ("table", "tables"):
        return (f"{error['input']!r} is not schema.table (e.g. public.orders): a schema and a "
                "table name of letters, digits, _, $ and - (the table's may also hold . and "
                "spaces), up to 64 each")
    return str(error["msg"])


def _plain(errors: Any) -> Any:
    """Validation errors as JSON (their ``ctx`` may hold exception objects)."""
    return [{k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in errors]


def build_app(service: Service, token: str | None, metrics: Any = None) -> FastAPI:
    """The application; ``metrics``: a callable giving the Prometheus exposition (bytes,
    content type), served at ``/metrics`` behind the token."""
    app = FastAPI(title="dblog", version="1", description=(
        "Control and status of a running dblog instance. Send `Authorization: Bearer <token>` "
        "when the instance has api.token_env set."))
    auth = [Depends(_auth(token))]
    app.include_router(_api_routes(service), dependencies=auth)
    _health_routes(app, service)
    _error_handlers(app)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        return HTMLResponse(STATUS_PAGE)

    if metrics is not None:
        @app.get("/metrics", dependencies=auth, tags=["metrics"],
                 response_class=Response, responses={401: ERRORS[401]})
        def scrape() -> Response:
            """Prometheus text exposition."""
            body, content_type = metrics()
            return Response(body, media_type=content_type)

    return app
