"""An output that reports this instance deposed (``LeadershipLost``) while the election still
says it leads ends the run with that error: with no election (a file state) another instance
writes to the same target, and a quiet end of the run would stop capture with exit status 0.
When the election itself lost the lead, the run ends quietly as before."""

from __future__ import annotations

import time

import pytest

from dblog.app.pipeline import Pipeline
from dblog.errors import LeadershipLost
from dblog.testing import ListOutput, MemoryConnector, MemoryDatabase, MemoryStateStore
from tests.unit.engine_script import fast_settings


class Election:
    def __init__(self) -> None:
        self.leader = True

    @property
    def epoch(self) -> int:
        return 1

    def is_leader(self) -> bool:
        return self.leader


def _pipeline(election: Election | None) -> tuple[Pipeline, ListOutput, MemoryDatabase]:
    db = MemoryDatabase()
    table = db.create_table("public.t", ["id"], ["id"])
    db.transaction([("insert", table, {"id": 1})])
    out = ListOutput()
    pipeline = Pipeline(MemoryConnector(db), [out], state=MemoryStateStore(), election=election,
                        settings=fast_settings(10, poll_timeout_s=0.01))
    return pipeline, out, db


def _insert_and_wait_for_the_end(db: MemoryDatabase, pipeline: Pipeline) -> None:
    table = next(iter(db.tables))
    db.transaction([("insert", table, {"id": 2})])
    deadline = time.monotonic() + 10
    while pipeline._thread is not None and pipeline._thread.is_alive():
        assert time.monotonic() < deadline, "the run did not end"
        time.sleep(0.01)


def test_without_an_election_an_outputs_leadership_lost_is_raised() -> None:
    pipeline, out, db = _pipeline(None)
    pipeline.start()
    out.fail_next = LeadershipLost("the target holds a newer epoch's commit")
    _insert_and_wait_for_the_end(db, pipeline)
    with pytest.raises(LeadershipLost, match="newer epoch"):
        pipeline.join(1)


def test_with_the_election_lost_the_run_ends_quietly() -> None:
    election = Election()
    pipeline, _, db = _pipeline(election)
    pipeline.start()
    election.leader = False
    _insert_and_wait_for_the_end(db, pipeline)
    pipeline.join(1)  # no error: the election ended the run
