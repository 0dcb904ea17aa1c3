"""The Prometheus endpoint scraped during a dump with writers: counters increase, lag is near
zero when the capture keeps up and grows while the source is written faster than captured (an
output that stalls holds the capture back)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .pgutil import wait_until
from .test_api_env import Env, GatedOutput, running, wait_dump

pytestmark = pytest.mark.integration


class Writer(threading.Thread):
    """Single-row updates of t_int, a few hundred a second, until stopped."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn, self.stopped, self.count = dsn, threading.Event(), 0

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stopped.is_set():
                conn.execute("UPDATE t_int SET v = md5(random()::text) WHERE id = %s",
                             (self.count % 5000 + 1,))
                self.count += 1
                time.sleep(0.002)

    def stop(self) -> None:
        self.stopped.set()
        self.join(10)


def scrape(env: Env) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = env.client().get("/metrics").text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(sample: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
          **labels: str) -> float:
    return sample.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture(scope="module")
def env(pg_admin_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("metrics")
    output = GatedOutput({"path": str(tmp / "out.jsonl")})
    with running(pg_admin_dsn, tmp, rows=20_000, output=output) as e:
        yield e


def test_metrics_during_a_dump_with_writers(env: Env) -> None:
    output = env.pipeline.engine.delivery.outputs[0]
    assert isinstance(output, GatedOutput)
    writer = Writer(env.dsn)
    writer.start()
    try:
        wait_until(lambda: value(scrape(env), "dblog_events_total", op="update",
                                 table="public.t_int") > 50, 30, "update events")
        wait_until(lambda: value(scrape(env), "dblog_lag_seconds") < 1.0, 30, "lag near zero")
        env.client().patch("/api/v1/knobs", json={"chunk_size": 500, "chunk_delay_s": 0.1})
        dump_id = env.client().post("/api/v1/dumps", json={"tables": ["public.t_int"]}
                                    ).json()["id"]
        first = scrape(env)
        time.sleep(1.5)
        second = scrape(env)
        for name, labels in (("dblog_events_total", {"op": "read", "table": "public.t_int"}),
                             ("dblog_events_total", {"op": "update", "table": "public.t_int"}),
                             ("dblog_events_total", {"op": "commit", "table": ""}),
                             ("dblog_dump_rows", {"dump": dump_id, "state": "running"})):
            assert value(second, name, **labels) > value(first, name, **labels), (name, labels)
        assert value(second, "dblog_up") == 1 and value(second, "dblog_leader") == 1
        calls = {labels: v for (name, labels), v in second.items()
                 if name == "dblog_output_calls_total"}
        assert any(dict(labels)["call"] == "write" and v > 0 for labels, v in calls.items()), \
            calls  # output latency: calls and seconds per output call
        assert any(n == "dblog_output_seconds_total" and v > 0 for (n, _), v in second.items())
        assert value(second, "dblog_table_state", table="public.t_int", state="dumping") == 1
        assert value(second, "dblog_dump_estimated_rows", dump=dump_id) > 15_000
        assert ("dblog_queue_depth", (("queue", "pending_commits"),)) in second
        assert value(second, "dblog_lag_seconds") < 2.0, "a dump with writers keeps up"
        # the output stalls: the source is written faster than it is captured
        output.gate.clear()
        time.sleep(3.0)
        stalled = value(scrape(env), "dblog_lag_seconds")
        time.sleep(1.0)
        later = value(scrape(env), "dblog_lag_seconds")
        assert stalled >= 2.5 and later >= stalled + 0.8, (stalled, later)
        output.gate.set()
        wait_until(lambda: value(scrape(env), "dblog_lag_seconds") < 1.0, 30,
                   "lag back near zero")
        env.client().patch("/api/v1/knobs", json={"chunk_size": 2000, "chunk_delay_s": 0})
        wait_dump(env, dump_id, ("done",))
    finally:
        output.gate.set()
        writer.stop()
    assert writer.count > 500
