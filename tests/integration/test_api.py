"""The HTTP API against a running PostgreSQL pipeline: every endpoint, authentication,
validation (4xx naming the problem, nothing queued, nothing executed), dump progress."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from .pgutil import read_events, wait_until
from .test_api_env import Env, running, wait_dump

pytestmark = pytest.mark.integration

ROWS = 20_000


@pytest.fixture(scope="module")
def env(pg_admin_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with running(pg_admin_dsn, tmp_path_factory.mktemp("api"), rows=ROWS) as e:
        yield e


ROUTES = [("GET", "/api/v1/status"), ("GET", "/api/v1/dumps"), ("POST", "/api/v1/dumps"),
          ("GET", "/api/v1/dumps/abc"), ("POST", "/api/v1/dumps/abc/pause"),
          ("PATCH", "/api/v1/knobs"), ("GET", "/metrics")]


@pytest.mark.parametrize("token", [None, "wrong"])
def test_every_control_route_needs_the_token(env: Env, token: str | None) -> None:
    client = env.client(token)
    before = len(env.pipeline.status()["dumps"])
    for method, path in ROUTES:
        response = client.request(method, path, json={"tables": ["public.t_int"]})
        assert response.status_code == 401, (method, path, response.text)
        assert response.headers["www-authenticate"] == "Bearer"
        assert "token" in response.json()["detail"]
    assert len(env.pipeline.status()["dumps"]) == before  # nothing was queued


def test_health_schema_and_page_need_no_token(env: Env) -> None:
    client = env.client(None)
    assert client.get("/livez").json()["ok"] is True
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["role"] == "single"
    schema = client.get("/openapi.json").json()
    assert {"/api/v1/dumps", "/api/v1/dumps/{dump_id}", "/api/v1/dumps/{dump_id}/{action}",
            "/api/v1/status", "/api/v1/knobs", "/livez", "/readyz", "/metrics"} \
        <= set(schema["paths"])
    page = client.get("/")
    assert page.status_code == 200 and "/api/v1/status" in page.text


def test_status(env: Env) -> None:
    def ready() -> bool:  # the first commit point follows catching up by a heartbeat
        status = env.client().get("/api/v1/status").json()
        return status["lag_s"] is not None and status["committed_position"] is not None

    wait_until(ready, 30, "a lag figure and a committed position")
    status = env.client().get("/api/v1/status").json()
    assert status["running"] is True and status["role"] == "single"
    assert status["committed_position"] and "/" in status["committed_position"]
    assert status["tables"] == {"public.t_comp": "streaming", "public.t_int": "streaming"}
    assert 0 <= status["lag_s"] < 5, status["lag_s"]  # idle source: caught up
    assert status["lag_bytes"] is None  # the embedded server was given no probe
    assert status["knobs"]["chunk_size"] == 200


def test_dump_of_a_table_shows_progress_pauses_and_resumes(env: Env) -> None:
    client = env.client()
    assert client.patch("/api/v1/knobs", json={"chunk_size": 100, "chunk_delay_s": 0.05}
                        ).json() == {"chunk_size": 100, "chunk_delay_s": 0.05}
    created = client.post("/api/v1/dumps", json={"tables": ["public.t_int"]})
    assert created.status_code == 201, created.text
    dump_id = created.json()["id"]
    wait_until(lambda: client.get(f"/api/v1/dumps/{dump_id}").json()["rows"] >= 1000, 30,
               "rows")
    time.sleep(1.5)  # the rate needs samples a second apart
    view = client.get(f"/api/v1/dumps/{dump_id}").json()
    assert view["state"] == "running" and view["kind"] == "tables"
    assert view["current_table"] == "public.t_int"
    assert view["last_key"] is not None and view["last_key"][0] >= 1000
    assert ROWS * 0.8 <= view["estimated_total"] <= ROWS * 1.2
    assert view["rows_per_s"] and view["rows_per_s"] > 0
    assert view["eta_s"] is not None and view["eta_s"] > 0
    assert view["chunks"] == view["rows"] // 100
    assert any(d["id"] == dump_id for d in client.get("/api/v1/dumps").json())
    paused = client.post(f"/api/v1/dumps/{dump_id}/pause")
    assert paused.status_code == 200 and paused.json()["state"] == "paused"
    rows = paused.json()["rows"]
    time.sleep(1.0)
    assert client.get(f"/api/v1/dumps/{dump_id}").json()["rows"] == rows
    again = client.post(f"/api/v1/dumps/{dump_id}/pause")
    assert again.status_code == 200  # pausing a paused dump changes nothing
    client.patch("/api/v1/knobs", json={"chunk_size": 2000, "chunk_delay_s": 0})
    assert client.post(f"/api/v1/dumps/{dump_id}/resume").json()["state"] in (
        "queued", "running", "done")
    done = wait_dump(env, dump_id, ("done",))
    assert done["rows"] == ROWS and done["percent"] == 100.0 and done["eta_s"] is None
    finished = client.post(f"/api/v1/dumps/{dump_id}/cancel")
    assert finished.status_code == 409 and "already done" in finished.json()["detail"]


def test_dump_of_keys_and_cancel(env: Env) -> None:
    client = env.client()
    one = client.post("/api/v1/dumps", json={"table": "public.t_int", "keys": [[1], [2], [3]]})
    assert one.status_code == 201, one.text
    assert wait_dump(env, one.json()["id"], ("done",))["rows"] == 3
    comp = client.post("/api/v1/dumps", json={"table": "public.t_comp",
                                              "keys": [[1, "k1"], [2, "k2"], [0, "nope"]]})
    assert comp.status_code == 201, comp.text
    view = wait_dump(env, comp.json()["id"], ("done",))
    assert view["kind"] == "keys" and view["rows"] == 2 and view["estimated_total"] == 3
    client.patch("/api/v1/knobs", json={"chunk_size": 50, "chunk_delay_s": 0.2})
    slow = client.post("/api/v1/dumps", json={"tables": ["public.t_int"]}).json()["id"]
    cancelled = client.post(f"/api/v1/dumps/{slow}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    client.patch("/api/v1/knobs", json={"chunk_size": 200, "chunk_delay_s": 0})
    assert client.get("/api/v1/dumps/nonexistent").status_code == 404
    assert client.post("/api/v1/dumps/nonexistent/resume").status_code == 404


BAD = [
    ({"tables": ["public.nope"]}, "public.nope"),
    ({"tables": ["public.t_int; DROP TABLE t_int"]}, "tables.0"),
    ({"tables": ["t_int\" ; DROP TABLE t_int; --"]}, "tables.0"),
    ({"table": "public.t_int", "keys": [[1, 2]]}, "1 value(s)"),
    ({"table": "public.t_int", "keys": [["abc"]]},
     "key value for column id (integer) of public.t_int is refused"),
    ({"table": "public.t_int", "keys": [[1], [1, 2]]}, "same number of values"),
    ({"table": "public.t_int", "keys": []}, "keys"),
    ({"table": "public.t_int", "keys": [[{"x": 1}]]}, "keys.0.0"),
    ({"keys": [[1]]}, "need the table"),
    ({"table": "public.t_int"}, "either keys or a key range"),
    ({"table": "public.t_int", "from": [10], "to": [1]}, "after to"),
    ({"table": "public.t_int", "from": [1, 2], "to": [3]}, "as many values"),
    ({"table": "public.t_int", "from": [1], "to": ["z"]}, "differ in type"),
    ({"table": "public.nope", "from": [1], "to": [5]}, "not captured"),
    ({"tables": ["public.t_int"], "table": "public.t_int", "keys": [[1]]}, "not both"),
    ({"tables": ["public.t_int"], "extra": 1}, "extra"),
    ({"dump_id": "../../etc"}, "dump_id"),
]


@pytest.mark.parametrize(("body", "names"), BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_requests_are_refused_naming_the_problem(env: Env, body: dict[str, object],
                                                     names: str) -> None:
    client = env.client()
    before = [d["id"] for d in client.get("/api/v1/dumps").json()]
    response = client.post("/api/v1/dumps", json=body)
    assert response.status_code == 422, response.text
    assert names in response.json()["detail"], response.json()
    assert [d["id"] for d in client.get("/api/v1/dumps").json()] == before
    assert env.count("public.t_int") >= ROWS  # nothing was executed


def _dumped(env: Env, dump_id: str, count: int) -> list[dict[str, Any]]:
    """The read events of ``dump_id`` in the output, once ``count`` of them are there."""
    def events() -> list[dict[str, Any]]:
        return [e for e in read_events(env.tmp / "out.jsonl") if e.get("dump_id") == dump_id]

    wait_until(lambda: len(events()) >= count, 30, f"{count} rows of dump {dump_id}")
    return events()


def test_a_key_range_is_checked_then_dumped_with_both_ends_included(env: Env) -> None:
    client = env.client()
    response = client.post("/api/v1/dumps", json={"table": "public.t_int",
                                                  "from": [10], "to": [20]})
    assert response.status_code == 201, response.text
    assert response.json()["kind"] == "range"
    assert response.json()["key_range"] == {"from": [10], "to": [20]}
    view = wait_dump(env, response.json()["id"], ("done", "failed"))
    assert view["state"] == "done" and view["rows"] == 11, view
    rows = _dumped(env, view["id"], 11)
    assert sorted(e["key"][0] for e in rows) == list(range(10, 21))
    assert all(e["op"] == "read" and e["after"] == {"id": e["key"][0], "v": f"init{e['key'][0]}"}
               for e in rows)
    # an open end, a composite key between existing keys, and a key of the wrong type
    tail = client.post("/api/v1/dumps", json={"table": "public.t_int", "from": [ROWS - 2]})
    assert wait_dump(env, tail.json()["id"], ("done", "failed"))["rows"] == 3
    comp = client.post("/api/v1/dumps", json={"table": "public.t_comp",
                                              "from": [3, "k3"], "to": [3, "k5"]})
    comp_id = wait_dump(env, comp.json()["id"], ("done",))["id"]
    keys = sorted(tuple(e["key"]) for e in _dumped(env, comp_id, 3))
    assert keys == [(3, "k3"), (3, "k33"), (3, "k43")], "text keys compare as the database does"
    bad = client.post("/api/v1/dumps", json={"table": "public.t_int", "from": ["abc"]})
    assert bad.status_code == 422 and "key value for column id (integer)" in bad.json()["detail"]


@pytest.mark.parametrize("body", [{}, {"chunk_size": 0}, {"chunk_delay_s": -1},
                                  {"chunk_size": "many"}, {"chunk_size": 10, "other": 1}])
def test_bad_knobs_are_refused(env: Env, body: dict[str, object]) -> None:
    before = dict(env.pipeline.engine.knobs.__dict__)
    response = env.client().patch("/api/v1/knobs", json=body)
    assert response.status_code == 422, response.text
    assert env.pipeline.engine.knobs.__dict__ == before
