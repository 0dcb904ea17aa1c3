"""The StateStore contract (dblog.spi.StateStore), run against every implementation."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dblog.core.dumps import dump_to_json, tables_dump
from dblog.core.model import TableId
from dblog.errors import FencedError, StateError
from dblog.spi import StateStore
from dblog.state import FileStateStore
from dblog.testing import MemoryStateStore

STORES: dict[str, Callable[[Path], StateStore]] = {
    "file": lambda tmp: FileStateStore(tmp / "state" / "dblog-state.json"),
    "memory": lambda tmp: MemoryStateStore(),
}


@pytest.fixture(params=[*sorted(STORES), "zookeeper"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    if request.param != "zookeeper":
        yield STORES[request.param](tmp_path)
        return
    from dblog.ha.zk import ZkPaths, ZooKeeperStateStore, connect

    client = connect(request.getfixturevalue("zk_hosts"), session_timeout_s=10)
    try:
        yield ZooKeeperStateStore(client, ZkPaths.of("/contract", uuid.uuid4().hex))
    finally:
        client.stop()
        client.close()


DOC: dict[str, object] = {
    "position": "lsn:16/B374D848",
    "seq": 12345678901234,
    "dumps": [
        {"id": "abc", "state": "running", "error": None, "internal": False, "key_index": 0,
         "keys": None, "tables": [{"table": "public.t", "started": True, "done": False,
                                   "last_key": [5, "é", None, True], "upper_key": [99, "zz", 1.5,
                                                                                  False],
                                   "chunks": 3, "rows": 30, "estimated_rows": 1000}]},
    ],
    "nested": {"empty": {}, "list": [], "unicode": "ünïcødé ✓ \u0000 \n", "neg": -1},
}


def test_load_on_empty_returns_none(store: StateStore) -> None:
    assert store.load() is None


def test_first_save_needs_expected_version_none(store: StateStore) -> None:
    with pytest.raises(FencedError):
        store.save({"seq": 1}, 0, 0)
    assert store.load() is None
    version = store.save({"seq": 1}, None, 0)
    stored = store.load()
    assert stored is not None
    assert stored.version == version
    assert stored.data == {"seq": 1}


def test_save_with_none_when_state_exists_is_fenced(store: StateStore) -> None:
    v0 = store.save({"seq": 1}, None, 0)
    with pytest.raises(FencedError):
        store.save({"seq": 2}, None, 0)
    stored = store.load()
    assert stored is not None and stored.version == v0 and stored.data == {"seq": 1}


def test_compare_and_set_advances_the_version(store: StateStore) -> None:
    v0 = store.save({"seq": 1}, None, 0)
    v1 = store.save({"seq": 2}, v0, 0)
    v2 = store.save({"seq": 3}, v1, 0)
    assert len({v0, v1, v2}) == 3
    stored = store.load()
    assert stored is not None and stored.version == v2 and stored.data == {"seq": 3}


def test_compare_and_set_with_a_stale_version_is_fenced(store: StateStore) -> None:
    v0 = store.save({"seq": 1}, None, 0)
    v1 = store.save({"seq": 2}, v0, 0)
    with pytest.raises(FencedError):
        store.save({"seq": 99}, v0, 0)
    with pytest.raises(FencedError):
        store.save({"seq": 99}, v1 + 1, 0)
    stored = store.load()
    assert stored is not None and stored.version == v1 and stored.data == {"seq": 2}


def test_a_save_with_an_older_epoch_is_fenced(store: StateStore) -> None:
    v0 = store.save({"leader": "new"}, None, 5)
    with pytest.raises(FencedError):
        store.save({"leader": "old"}, v0, 4)  # right version, deposed leader
    stored = store.load()
    assert stored is not None and stored.version == v0 and stored.data == {"leader": "new"}
    v1 = store.save({"leader": "new", "n": 2}, v0, 5)  # same epoch still writes
    assert store.load().data == {"leader": "new", "n": 2}  # type: ignore[union-attr]
    assert store.load().version == v1  # type: ignore[union-attr]


def test_a_newer_epoch_takes_over_and_fences_the_old_one(store: StateStore) -> None:
    v0 = store.save({"leader": 1}, None, 1)
    v1 = store.save({"leader": 2}, v0, 2)  # the successor loaded v0 and writes
    stored = store.load()
    assert stored is not None and stored.version == v1 and stored.data == {"leader": 2}
    with pytest.raises(FencedError):
        store.save({"leader": 1, "late": True}, v1, 1)  # the deposed leader, even up to date
    assert store.load().data == {"leader": 2}  # type: ignore[union-attr]
    v2 = store.save({"leader": 3}, v1, 7)
    assert store.load().version == v2  # type: ignore[union-attr]


def test_a_newer_epoch_with_a_stale_version_is_still_fenced(store: StateStore) -> None:
    v0 = store.save({"n": 0}, None, 1)
    store.save({"n": 1}, v0, 1)
    with pytest.raises(FencedError):
        store.save({"n": 2}, v0, 2)
    assert store.load().data == {"n": 1}  # type: ignore[union-attr]


def test_data_round_trips_exactly(store: StateStore) -> None:
    version = store.save(DOC, None, 0)
    stored = store.load()
    assert stored is not None
    assert stored.version == version
    assert stored.data == DOC
    assert json.dumps(stored.data, sort_keys=True) == json.dumps(DOC, sort_keys=True)


def test_changing_the_saved_dict_afterwards_does_not_change_the_stored_state(
    store: StateStore,
) -> None:
    dump = dump_to_json(tables_dump([TableId("public", "t")]))  # a nested, valid state
    data: dict[str, object] = {"seq": 1, "dumps": [dump]}
    saved = copy.deepcopy(data)
    store.save(data, None, 0)
    data["seq"] = 2
    data["dumps"][0]["id"] = "b"  # type: ignore[index]
    assert store.load().data == saved  # type: ignore[union-attr]


def test_loaded_data_is_not_aliased_to_later_saves(store: StateStore) -> None:
    v0 = store.save({"seq": 1}, None, 0)
    first = store.load()
    store.save({"seq": 2}, v0, 0)
    assert first is not None and first.data == {"seq": 1}


# -- file store specifics ------------------------------------------------------------------


def test_file_store_state_survives_a_new_instance(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    v0 = FileStateStore(path).save(DOC, None, 3)
    again = FileStateStore(path)
    stored = again.load()
    assert stored is not None and stored.version == v0 and stored.data == DOC
    with pytest.raises(FencedError):
        again.save({}, v0, 2)
    assert again.save({"x": 1}, v0, 3) == v0 + 1


def test_file_store_ignores_a_leftover_torn_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    store = FileStateStore(path)
    v0 = store.save({"seq": 1}, None, 0)
    leftovers = [path.with_name(f".{path.name}.tmp"), path.with_name(f"{path.name}.tmp")]
    for leftover in leftovers:
        leftover.write_text('{"version": 99, "epoch": 0, "data": {"se', encoding="utf-8")
    stored = store.load()
    assert stored is not None and stored.version == v0 and stored.data == {"seq": 1}
    v1 = store.save({"seq": 2}, v0, 0)
    stored = FileStateStore(path).load()
    assert stored is not None and stored.version == v1 and stored.data == {"seq": 2}


def test_file_store_keeps_the_old_state_when_a_write_is_torn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash while writing the new document leaves the previous one in place."""
    path = tmp_path / "s.json"
    store = FileStateStore(path)
    v0 = store.save({"seq": 1}, None, 0)
    real_fsync = os.fsync

    def crash(fd: int) -> None:
        raise OSError("power lost")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(StateError, match="power lost"):  # the file store names the file
        store.save({"seq": 2, "big": "x" * 100_000}, v0, 0)
    monkeypatch.setattr(os, "fsync", real_fsync)
    stored = FileStateStore(path).load()
    assert stored is not None and stored.version == v0 and stored.data == {"seq": 1}
    assert store.save({"seq": 3}, v0, 0) == v0 + 1
    assert FileStateStore(path).load().data == {"seq": 3}  # type: ignore[union-attr]


def test_file_store_keeps_the_old_state_when_the_rename_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.json"
    store = FileStateStore(path)
    v0 = store.save({"seq": 1}, None, 0)

    def fail(src: Any, dst: Any) -> None:
        raise OSError("crash before rename")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(StateError, match="crash before rename"):
        store.save({"seq": 2}, v0, 0)
    monkeypatch.undo()
    stored = store.load()
    assert stored is not None and stored.version == v0 and stored.data == {"seq": 1}


def test_file_store_reports_a_corrupt_state_file_clearly(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('{"version": 1, "da', encoding="utf-8")
    with pytest.raises(StateError, match="not valid JSON"):
        FileStateStore(path).load()


def test_file_store_compare_and_set_holds_between_two_store_instances(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two writers (e.g. a deposed leader's engine and its successor's, or two processes) that
    both read version v must not both succeed in writing v + 1: one of them is fenced."""
    path = tmp_path / "s.json"
    v0 = FileStateStore(path).save({"writer": None}, None, 1)
    first, second = FileStateStore(path), FileStateStore(path)
    both_read = threading.Barrier(2, timeout=0.5)
    real_read = FileStateStore._read

    def read_then_wait(self: FileStateStore) -> dict[str, Any] | None:
        doc = real_read(self)
        if threading.current_thread().name.startswith("writer-"):
            # both writers read the same version; if the other one is blocked by a lock the
            # barrier breaks and this one goes on alone, which is fine
            with contextlib.suppress(threading.BrokenBarrierError):
                both_read.wait()
        return doc

    monkeypatch.setattr(FileStateStore, "_read", read_then_wait)
    outcomes: dict[str, str] = {}

    def write(store: FileStateStore, name: str) -> None:
        try:
            store.save({"writer": name}, v0, 1)
            outcomes[name] = "saved"
        except FencedError:
            outcomes[name] = "fenced"
        except Exception as exc:  # reported by the assertion below
            outcomes[name] = f"error: {exc!r}"

    threads = [threading.Thread(target=write, args=(s, n), name=f"writer-{n}")
               for s, n in ((first, "a"), (second, "b"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    monkeypatch.undo()
    assert sorted(outcomes.values()) == ["fenced", "saved"], outcomes
    stored = FileStateStore(path).load()
    assert stored is not None and stored.version == v0 + 1
    winner = next(n for n, o in outcomes.items() if o == "saved")
    assert stored.data == {"writer": winner}
