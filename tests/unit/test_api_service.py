"""The API over a pipeline that stopped on an error that is not a DblogError (a bug): status,
readiness and metrics answer as for any stopped capture (503 with the cause and a fix,
``dblog_up 0``), not with a server error."""

from __future__ import annotations

from typing import Any

import pytest

from dblog.app.pipeline import Pipeline
from dblog.testing import ListOutput, MemoryConnector, MemoryStateStore
from tests.unit.apiserve import served
from tests.unit.engine_script import fast_settings
from tests.unit.test_engine_memory import make_db


class BuggyConnector(MemoryConnector):
    """Its log reader fails with a plain ValueError, as a bug would."""

    def log_reader(self) -> Any:
        reader = super().log_reader()

        def boom(timeout: float) -> Any:
            raise ValueError("a bug")

        reader.poll = boom  # type: ignore[method-assign]
        return reader


def crashed_pipeline() -> Pipeline:
    db, _ = make_db(5)
    pipeline = Pipeline(BuggyConnector(db), [ListOutput()], state=MemoryStateStore(),
                        settings=fast_settings(4, poll_timeout_s=0.01))
    with pytest.raises(ValueError, match="a bug"):
        pipeline.start(wait_ready=10)
    return pipeline


def test_a_capture_stopped_by_a_bug_answers_503_with_the_cause() -> None:
    with served(crashed_pipeline()) as client:
        for path in ("/api/v1/status", "/api/v1/dumps"):
            answer = client.get(path)
            assert answer.status_code == 503, (path, answer.text)
            assert "ValueError: a bug" in answer.json()["detail"] and answer.json()["fix"]
        ready = client.get("/readyz")
        assert ready.status_code == 503 and "ValueError" in ready.json()["detail"]
        metrics = client.get("/metrics")
        assert metrics.status_code == 200
        assert "dblog_up 0.0" in metrics.text.splitlines()
