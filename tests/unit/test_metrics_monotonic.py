"""Prometheus counters are monotonic for the life of the process: an in-process restart of
the pipeline after a transient failure (``Pipeline.run``'s loop, the ``dblog run`` of a file
state) keeps the engine's counters; it does not start them again at 0. (The HA instance's
restarts and terms: tests/unit/test_ha_runner.py.)"""

from __future__ import annotations

import threading
import time
from typing import Any

from dblog.app.pipeline import Pipeline
from dblog.errors import RetryableSourceError
from dblog.testing import ListOutput, MemoryConnector, MemoryStateStore
from tests.unit.apiserve import served
from tests.unit.engine_script import fast_settings
from tests.unit.test_engine_memory import make_db


class FailsOnceAfterEvents(MemoryConnector):
    """Its log reader fails once, retryably, on its 20th poll (the log delivered by then)."""

    polls = 0

    def log_reader(self) -> Any:
        reader = super().log_reader()
        poll = reader.poll

        def flaky(timeout: float) -> Any:
            self.polls += 1
            if self.polls == 20:
                raise RetryableSourceError("source went away (test)")
            return poll(timeout)

        reader.poll = flaky  # type: ignore[method-assign]
        return reader


def _inserts(text: str) -> float:
    line = next(x for x in text.splitlines()
                if x.startswith('dblog_events_total{op="insert",table="public.t"}'))
    return float(line.rsplit(" ", 1)[1])


def test_event_counters_keep_counting_across_an_in_process_restart() -> None:
    db, table = make_db(0)
    for k in range(3):
        db.transaction([("upsert", table, {"id": k, "v": 1})])
    pipeline = Pipeline(FailsOnceAfterEvents(db), [ListOutput()], state=MemoryStateStore(),
                        settings=fast_settings())
    runner = threading.Thread(target=pipeline.run, daemon=True)
    runner.start()
    with served(pipeline) as client:
        deadline = time.monotonic() + 20
        while not (pipeline.restarts == 1 and pipeline.engine.running.is_set()):
            assert time.monotonic() < deadline and runner.is_alive()
            time.sleep(0.01)
        after_restart = client.get("/metrics").text
        db.transaction([("upsert", table, {"id": 9, "v": 1})])
        while _inserts(client.get("/metrics").text) < 4:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        pipeline.stop()
    runner.join(10)
    assert _inserts(after_restart) == 3.0, after_restart
    assert "dblog_engine_restarts_total 1.0" in after_restart.splitlines()
