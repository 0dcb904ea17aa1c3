"""Issue 16, finding 2: the jsonl output notices that its file was removed or replaced before
anything written into the lost file is committed, and a start without a state does not
erase an output that holds events unless the user asks for it (``reset: true``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from dblog.core.model import TableId
from dblog.errors import FatalOutputError
from dblog.outputs.jsonl import JsonlOutput
from dblog.state import state_from_json
from dblog.testing import MemoryDatabase, MemoryStateStore, replay
from tests.unit.engine_script import Run, fast_settings, source_rows

T = TableId("public", "t")


def lines(path: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def remove(path: Path) -> None:
    path.unlink()


def replace_with_copy(path: Path) -> None:
    copy = path.with_name("copy.jsonl")
    copy.write_bytes(path.read_bytes())
    os.replace(copy, path)


@pytest.mark.parametrize("mishap,word", [(remove, "removed"), (replace_with_copy, "replaced")])
def test_a_removed_or_replaced_file_stops_the_pipeline_before_commit(
        tmp_path: Path, mishap: Callable[[Path], None], word: str) -> None:
    db = MemoryDatabase()
    db.create_table("public.t", ["id", "v"], ["id"])
    path, store = tmp_path / "out.jsonl", MemoryStateStore()
    committed: list[int] = []

    def on_poll(run: Run) -> None:
        if run.polls == 5:
            db.transaction([("insert", T, {"id": 1, "v": 1})])
        if run.polls == 40:
            assert store.stored is not None
            committed.append(state_from_json(store.stored.data).seq)
            mishap(path)
        if run.polls == 45:
            db.transaction([("insert", T, {"id": 2, "v": 2})])

    run = Run(db, [JsonlOutput({"path": str(path)})], store, on_poll=on_poll,
              stop_when_idle=False, settings=fast_settings(5))
    with pytest.raises(FatalOutputError) as stopped:
        run.go()
    assert word in stopped.value.message and str(path) in stopped.value.message
    assert store.stored is not None
    assert state_from_json(store.stored.data).seq == committed[0] == 3  # BEGIN, insert, COMMIT


def test_a_start_without_state_does_not_erase_an_output_holding_events(tmp_path: Path) -> None:
    db = MemoryDatabase()
    table = db.create_table("public.t", ["id", "v"], ["id"])
    db.transaction(("insert", table, {"id": i, "v": i}) for i in range(5))
    path = tmp_path / "out.jsonl"
    Run(db, [JsonlOutput({"path": str(path)})], MemoryStateStore(),
        settings=fast_settings(5)).go()
    before = path.read_bytes()
    assert len(lines(path)) == 7
    with pytest.raises(FatalOutputError) as refused:  # the state is gone: a new store
        Run(db, [JsonlOutput({"path": str(path)})], MemoryStateStore(),
            settings=fast_settings(5)).go()
    assert "holds events" in refused.value.message and "reset: true" in str(refused.value.fix)
    assert path.read_bytes() == before
    db.transaction([("insert", table, {"id": 9, "v": 9})])
    run = Run(db, [JsonlOutput({"path": str(path), "reset": True})], MemoryStateStore(),
              settings=fast_settings(5))
    run.engine.request_dump(["public.t"])
    run.go()
    events = lines(path)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert replay(events) == source_rows(db)
