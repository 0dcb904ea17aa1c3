"""An output that commits a checkpoint with its data (CheckpointingOutput): a crash between
its commit and the state store's save neither loses nor duplicates an event, because the next
run resumes from the output's checkpoint and the output skips what it already committed."""

from __future__ import annotations

import random

import pytest

from dblog.core.acks import PipelineState
from dblog.core.model import Op
from dblog.errors import StateError
from dblog.state import state_from_json
from dblog.testing import MemoryStateStore, TransactionalListOutput

from .engine_script import (
    Run,
    VersionBook,
    assert_replay_equals_source,
    assert_seq_contiguous,
    fast_settings,
)
from .test_engine_memory import make_db


class CrashingStore(MemoryStateStore):
    """Refuses every save after the first ``healthy`` ones (the process dies right after the
    output committed); the stored state stays where it was."""

    def __init__(self, healthy: int) -> None:
        super().__init__()
        self.healthy = healthy

    def save(self, data: dict[str, object], expected_version: int | None, epoch: int) -> int:
        if self.writes >= self.healthy:
            raise StateError("crash: the state store save did not happen")
        return super().save(data, expected_version, epoch)


def _state(store: MemoryStateStore) -> PipelineState:
    assert store.stored is not None
    return state_from_json(store.stored.data)


def test_a_crash_between_the_output_commit_and_the_state_save_loses_and_repeats_nothing(
) -> None:
    db, t = make_db(60)
    rng, book = random.Random(3), VersionBook()
    out, store = TransactionalListOutput(), CrashingStore(healthy=3)

    def write(run: Run) -> None:
        if run.polls < 80:
            n = book.next()
            book.transaction(db, [(rng.choice(["upsert", "delete"]), t,
                                   {"id": rng.randrange(80), "v": n})], n)

    first = Run(db, [out], store, settings=fast_settings(7), on_poll=write)
    first.engine.request_dump([t])
    with pytest.raises(StateError, match="crash"):
        first.go()
    stored_seq = _state(store).seq
    assert out.checkpoint is not None
    read_after = sorted({e.key for e in out.events if e.seq > stored_seq and e.op is Op.READ
                         and e.key is not None})
    assert len(read_after) > 10, "the output must have committed chunks the store has not"

    # while dblog is down the source changes: rows of those chunks go, one more is updated;
    # resumed from the store's older state, the chunks would be read again with other rows
    # and other sequence numbers, and the output would skip the wrong events
    n = book.next()
    book.transaction(db, [("delete", t, {"id": k[0], "v": n}) for k in read_after[:6]], n)
    n = book.next()
    book.transaction(db, [("upsert", t, {"id": read_after[-1][0], "v": n})], n)

    store.healthy = 10**9
    second = Run(db, [out], store, settings=fast_settings(7), on_poll=write)
    second.go()
    assert _state(store).seq >= out.checkpoint.seq
    assert_seq_contiguous(out.events)  # no event twice, none missing
    assert_replay_equals_source(out.events, db)
    assert out.last_committed == out.events[-1].seq


def test_without_a_crash_the_state_follows_the_output_commits() -> None:
    db, t = make_db(30)
    out, store = TransactionalListOutput(), MemoryStateStore()
    run = Run(db, [out], store, settings=fast_settings(5))
    run.engine.request_dump([t])
    run.go()
    assert_replay_equals_source(out.events, db)
    assert out.checkpoint is not None
    assert store.stored is not None and out.checkpoint.state == store.stored.data
    assert out.skipped == 0
