"""The first run's initial dumps are in the first state it saves: a failure right after that
save (kill -9, a ZooKeeper connection loss, leadership lost) cannot lose them, since every
later run finds a stored state and never queues initial_dumps again."""

from __future__ import annotations

import contextlib

import pytest

from dblog.errors import RetryableStateError
from dblog.spi.state import StoredState
from dblog.testing import ListOutput, MemoryDatabase, MemoryStateStore
from tests.unit.engine_script import Run, fast_settings


class FailingSecondSave(MemoryStateStore):
    """Its second save fails as a ZooKeeper connection loss would."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_at: int | None = 2

    def save(self, data: dict[str, object], expected_version: int | None, epoch: int) -> int:
        if self.fail_at is not None and self.writes + 1 == self.fail_at:
            self.fail_at = None
            raise RetryableStateError("writing state: ZooKeeper unavailable (ConnectionLoss)")
        return super().save(data, expected_version, epoch)


def test_initial_dumps_survive_a_failure_right_after_the_first_save() -> None:
    db = MemoryDatabase()
    a = db.create_table("public.a", ["id", "v"], ["id"])
    b = db.create_table("public.b", ["id", "v"], ["id"])
    db.transaction(("insert", a, {"id": i, "v": i}) for i in range(20))
    db.transaction(("insert", b, {"id": i, "v": i}) for i in range(5))
    store = FailingSecondSave()
    settings = fast_settings(5, initial_dumps=(("public.a",), ("public.b",)))
    with contextlib.suppress(RetryableStateError):  # the old code: the second save failed
        Run(db, [ListOutput()], store, settings=settings).go()
    stored = store.stored
    assert isinstance(stored, StoredState)
    dumps = stored.data["dumps"]
    assert isinstance(dumps, list) and len(dumps) == 2, stored.data
    out = ListOutput()
    Run(db, [out], store, settings=settings).go()  # the restart (or the next leader)
    dumped = sorted((e.table.name if e.table else "", e.key) for e in out.events if e.dump_id)
    assert dumped == sorted([("a", (i,)) for i in range(20)] + [("b", (i,)) for i in range(5)])


def test_a_failing_first_save_leaves_nothing_stored() -> None:
    class FailingFirstSave(FailingSecondSave):
        def __init__(self) -> None:
            super().__init__()
            self.fail_at = 1

    db = MemoryDatabase()
    db.create_table("public.a", ["id", "v"], ["id"])
    store = FailingFirstSave()
    with pytest.raises(RetryableStateError):
        Run(db, [ListOutput()], store,
            settings=fast_settings(5, initial_dumps=(("public.a",),))).go()
    assert store.stored is None
