"""Issue 16, property: random dump requests (random names, key shapes, types, sizes, None,
unicode) thrown at a running pipeline while writers change the source. The pipeline never
stops, every request is either accepted (and its dump finishes) or rejected with a
DumpRequestError saying why, and the replayed output still equals the source."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dblog.app.pipeline import Pipeline
from dblog.core.model import LogItem, TableId
from dblog.engine import EngineSettings
from dblog.errors import DumpRequestError
from dblog.testing import (
    ListOutput,
    MemoryConnector,
    MemoryDatabase,
    MemoryLogReader,
    MemoryStateStore,
)
from tests.unit.engine_script import assert_replay_equals_source

A, B = TableId("public", "a"), TableId("public", "b")

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 300), st.integers(-(2**200), 2**200),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.binary(max_size=4), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.lists(st.integers(), max_size=2))
NAMES = st.one_of(
    st.sampled_from(["public.a", "public.b", "a", "b", "public.nope", "public.", ".a", "",
                     "public.a\x00", "Public.A", "public.a ", "schema.ünï", "x" * 600]),
    st.text(max_size=20), st.none(), st.integers(), st.binary(max_size=4),
    st.lists(st.text(max_size=3), max_size=2), st.builds(TableId, st.text(max_size=4),
                                                         st.text(max_size=4)))
KEYS = st.one_of(
    st.lists(st.lists(SCALARS, max_size=3), max_size=12),
    st.lists(st.lists(st.integers(0, 150), min_size=1, max_size=1), min_size=1, max_size=40),
    st.lists(st.tuples(st.text(max_size=3), st.integers(0, 150)).map(list), max_size=10),
    st.lists(SCALARS, max_size=4), SCALARS, st.text(max_size=6))


GOOD = st.one_of(
    st.lists(st.sampled_from(["public.a", "public.b", "a", "b"]), min_size=1, max_size=3).map(
        lambda tables: {"tables": tables, "table": None, "keys": None}),
    st.lists(st.lists(st.integers(0, 160), min_size=1, max_size=1), min_size=1, max_size=30).map(
        lambda keys: {"tables": None, "table": "public.a", "keys": keys}),
    st.lists(st.tuples(st.text(max_size=2), st.integers(0, 160)).map(list), min_size=1,
             max_size=30).map(lambda keys: {"tables": None, "table": "b", "keys": keys}))


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    form = draw(st.sampled_from(["tables", "keys", "both", "all", "good", "good", "good"]))
    if form == "good":
        return draw(GOOD)
    if form == "all":
        return {"tables": None, "table": None, "keys": None}
    tables = draw(st.one_of(st.lists(NAMES, max_size=4), NAMES))
    if form == "tables":
        return {"tables": tables, "table": None, "keys": None}
    request = {"tables": None, "table": draw(NAMES), "keys": draw(KEYS)}
    if form == "both":
        request["tables"] = tables
    return request


class SleepyReader(MemoryLogReader):
    """The memory log reader waits a little on an empty poll (a real reader waits for the
    log), so the engine thread does not spin against the writers."""

    def poll(self, timeout: float) -> list[LogItem]:
        items = super().poll(timeout)
        if not items:
            time.sleep(min(timeout, 0.002))
        return items


class SleepyConnector(MemoryConnector):
    def log_reader(self) -> SleepyReader:
        return SleepyReader(self.db)


@dataclass
class Writers:
    db: MemoryDatabase
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> Writers:
        self.thread = threading.Thread(target=self._write, daemon=True)
        self.thread.start()
        return self

    def _write(self) -> None:
        rng, n = random.Random(16), 0
        while not self.stop.wait(0.001):
            n += 1
            k = rng.randrange(150)
            op = rng.choice(["upsert", "upsert", "update", "delete"])
            self.db.transaction([(op, A, {"id": k, "v": n}),
                                 (op, B, {"k": str(k % 7), "n": k, "v": n})])

    def join(self) -> None:
        self.stop.set()
        assert self.thread is not None
        self.thread.join(10)


@pytest.fixture()
def running() -> Iterator[tuple[Pipeline, MemoryDatabase, ListOutput]]:
    db = MemoryDatabase()
    db.create_table("public.a", ["id", "v"], ["id"])
    db.create_table("public.b", ["k", "n", "v"], ["k", "n"])
    db.transaction([("insert", A, {"id": i, "v": 0}) for i in range(100)])
    out = ListOutput()
    settings = EngineSettings(chunk_size=9, poll_timeout_s=0.01, flush_interval_s=0.05,
                              heartbeat_interval_s=1e9, progress_interval_s=1e9,
                              window_timeout_s=1e9, batch_size=64)
    pipeline = Pipeline(SleepyConnector(db), [out], state=MemoryStateStore(),
                        settings=settings).start()
    try:
        yield pipeline, db, out
    finally:
        pipeline.stop()


def test_random_requests_never_stop_the_pipeline_and_the_output_replays_the_source(
        running: tuple[Pipeline, MemoryDatabase, ListOutput]) -> None:
    pipeline, db, out = running
    writers = Writers(db).start()
    accepted: list[str] = []
    rejected: list[str] = []

    @settings(max_examples=300, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(request=requests())
    def throw(request: dict[str, Any]) -> None:
        future = pipeline.engine.request_dump(request["tables"], table=request["table"],
                                              keys=request["keys"])
        try:
            accepted.append(future.result(30))
        except DumpRequestError as exc:
            assert exc.message.strip(), request
            rejected.append(exc.message)
        assert pipeline.is_running(), request
        failed = [d for d in pipeline.status()["dumps"] if d["state"] == "failed"]
        assert not failed, failed  # an accepted dump of the memory source never fails

    try:
        throw()
    finally:
        writers.join()
    print(f"{len(accepted)} requests accepted, {len(rejected)} rejected; reasons seen:",
          sorted({r.split(":")[0][:40] for r in rejected})[:12])
    assert accepted and rejected
    _wait_finished(pipeline, accepted)
    db.transaction([("insert", A, {"id": 10_000, "v": -1})])
    _wait(lambda: any(e.key == (10_000,) for e in out.events), "the last write")
    pipeline.stop()
    assert_replay_equals_source(out.events, db)
    seqs = [e.seq for e in out.events]
    assert seqs == list(range(1, len(seqs) + 1))


def _wait_finished(pipeline: Pipeline, accepted: list[str]) -> None:
    """Every accepted dump is done (the state keeps the last 50 finished dumps: an older one
    is gone only after it finished, and none failed while the requests came in)."""
    def finished() -> bool:
        states = {d["id"]: d["state"] for d in pipeline.status()["dumps"]}
        return all(states.get(d, "done") in ("done", "failed") for d in accepted)

    _wait(finished, "every accepted dump to finish")
    states = {d["id"]: (d["state"], d["error"]) for d in pipeline.status()["dumps"]}
    assert all(states.get(d, ("done", None))[0] == "done" for d in accepted), states


def _wait(predicate: Any, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
