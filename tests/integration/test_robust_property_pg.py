"""Issue 16, property, on a real PostgreSQL: random dump requests (random names, key shapes,
types, sizes, None, unicode) thrown at a running pipeline while writers change the source.
The pipeline never stops, every request is accepted (and its dump finishes) or rejected with a
DumpRequestError saying why, and the replayed output equals the source."""

from __future__ import annotations

import random
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dblog.errors import DumpRequestError

from .pgutil import read_events, replayed, source_rows, wait_until
from .test_robust_pg import execute, pipeline_for

pytestmark = pytest.mark.integration
TABLES = ["public.t_int", "public.t_pair", "public.t_uuid", 'public.we "ird\\']

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**64), 2**64), st.integers(0, 300),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=10),
    st.uuids().map(str), st.sampled_from(["1", " 2 ", "1e3", "0x10", "9223372036854775808"]))
NAMES = st.one_of(st.sampled_from([*TABLES, "t_int", "public.nope", "pg_catalog.pg_class",
                                   "dblog.watermark", "public.", ""]),
                  st.text(max_size=16), st.none(), st.integers())
GOOD = st.one_of(
    st.lists(st.sampled_from(TABLES), min_size=1, max_size=3).map(
        lambda tables: {"tables": tables, "table": None, "keys": None}),
    st.lists(st.lists(st.integers(0, 200), min_size=1, max_size=1), min_size=1,
             max_size=40).map(lambda keys: {"tables": None, "table": "public.t_int",
                                            "keys": keys}),
    st.lists(st.tuples(st.sampled_from("abcdefg"), st.integers(0, 200)).map(list),
             min_size=1, max_size=20).map(
        lambda keys: {"tables": None, "table": "public.t_pair", "keys": keys}))


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    form = draw(st.sampled_from(["tables", "keys", "keys", "good", "good", "good"]))
    if form == "good":
        return draw(GOOD)
    if form == "tables":
        return {"tables": draw(st.one_of(st.lists(NAMES, max_size=3), NAMES)), "table": None,
                "keys": None}
    keys = draw(st.one_of(st.lists(st.lists(SCALARS, max_size=3), max_size=10),
                          st.lists(SCALARS, max_size=3), SCALARS))
    return {"tables": None, "table": draw(NAMES), "keys": keys}


def create(dsn: str) -> None:
    execute(dsn, "CREATE TABLE t_int (id int PRIMARY KEY, v int)",
            "CREATE TABLE t_pair (k text, n int, v int, PRIMARY KEY (k, n))",
            "CREATE TABLE t_uuid (u uuid PRIMARY KEY, v int)",
            'CREATE TABLE "we ""ird\\" (id int PRIMARY KEY, "a""b" text)',
            "INSERT INTO t_int SELECT g, 0 FROM generate_series(1, 150) g",
            "INSERT INTO t_pair SELECT chr(97 + g % 7), g, 0 FROM generate_series(1, 150) g",
            "INSERT INTO t_uuid SELECT gen_random_uuid(), g FROM generate_series(1, 50) g",
            'INSERT INTO "we ""ird\\" SELECT g, \'x\' || g FROM generate_series(1, 40) g')


def write(dsn: str, stop: threading.Event) -> None:
    rng = random.Random(16)
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.wait(0.005):
            k, v = rng.randrange(200), rng.randrange(1000)
            with conn.transaction():
                if rng.random() < 0.3:
                    conn.execute("DELETE FROM t_int WHERE id = %s", (k,))
                    conn.execute("DELETE FROM t_pair WHERE n = %s", (k,))
                else:
                    conn.execute("INSERT INTO t_int VALUES (%s, %s) ON CONFLICT (id) DO "
                                 "UPDATE SET v = excluded.v", (k, v))
                    conn.execute("INSERT INTO t_pair VALUES (chr(97 + %s %% 7), %s, %s) ON "
                                 "CONFLICT (k, n) DO UPDATE SET v = excluded.v", (k, k, v))
                conn.execute("UPDATE t_uuid SET v = v + 1 WHERE v = %s", (k % 50,))


def test_random_requests_never_stop_a_postgres_pipeline(pg_dsn: str, tmp_path: Path) -> None:
    create(pg_dsn)
    pipeline = pipeline_for(pg_dsn, tmp_path).start()
    stop = threading.Event()
    writer = threading.Thread(target=write, args=(pg_dsn, stop), daemon=True)
    writer.start()
    accepted: list[str] = []
    rejected: list[str] = []

    @settings(max_examples=120, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(request=requests())
    def throw(request: dict[str, Any]) -> None:
        future = pipeline.engine.request_dump(request["tables"], table=request["table"],
                                              keys=request["keys"])
        try:
            accepted.append(future.result(60))
        except DumpRequestError as exc:
            assert exc.message.strip(), request
            rejected.append(exc.message)
        assert pipeline.is_running(), request
        failed = [d for d in pipeline.status()["dumps"] if d["state"] == "failed"]
        assert not failed, failed

    try:
        throw()
    finally:
        stop.set()
        writer.join(30)
    print(f"{len(accepted)} requests accepted, {len(rejected)} rejected")
    assert accepted and rejected
    try:
        _finish(pipeline, accepted, pg_dsn, tmp_path)
    finally:
        pipeline.stop()
    events = read_events(tmp_path / "out.jsonl")
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert replayed(events) == source_rows(pg_dsn, TABLES)


def _finish(pipeline: Any, accepted: list[str], dsn: str, tmp: Path) -> None:
    def finished() -> bool:
        states = {d["id"]: d["state"] for d in pipeline.status()["dumps"]}
        return all(states.get(d, "done") in ("done", "failed") for d in accepted)

    wait_until(finished, 300, "every accepted dump to finish")
    states = {d["id"]: (d["state"], d["error"]) for d in pipeline.status()["dumps"]}
    assert all(states.get(d, ("done", None))[0] == "done" for d in accepted), states
    marker = uuid.uuid4()
    execute(dsn, f"INSERT INTO t_uuid VALUES ('{marker}', -1)")
    wait_until(lambda: any(e.get("key") == [str(marker)] for e in read_events(tmp / "out.jsonl")),
               120, "the last write")
    time.sleep(0.3)  # the state commit after the marker
