"""Issue 16, finding 3: every damage of a state file gives one StateError naming the file and
the fix (for ``run``, for ``status``, and for a save), never a raw KeyError, TypeError or
PermissionError."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dblog.errors import FencedError, StateError
from dblog.state import FileStateStore
from dblog.testing import ListOutput, MemoryDatabase
from tests.unit.engine_script import Run, fast_settings

GOOD_DUMP: dict[str, Any] = {
    "id": "d1", "state": "done", "error": None, "internal": False, "key_index": 0,
             "keys": None, "tables": [{"table": ["public", "t"], "started": True, "done": True,
                                       "last_key": [3], "upper_key": [3], "chunks": 1,
                                       "rows": 3}]}

DAMAGED: dict[str, bytes] = {
    "empty": b"",
    "not-json": b"{\"version\": 3, ",
    "binary": b"\x00\xff\xfe garbage",
    "object-without-fields": b"{}",
    "list": b"[]",
    "string": b'"x"',
    "number": b"42",
    "string-version": json.dumps({"version": "a", "epoch": 0, "data": {}}).encode(),
    "null-version": json.dumps({"version": None, "epoch": 0, "data": {}}).encode(),
    "bool-version": json.dumps({"version": True, "epoch": 0, "data": {}}).encode(),
    "no-data": json.dumps({"version": 1, "epoch": 0}).encode(),
    "data-list": json.dumps({"version": 1, "epoch": 0, "data": []}).encode(),
    "epoch-string": json.dumps({"version": 1, "epoch": "x", "data": {}}).encode(),
    "bad-position": json.dumps({"version": 1, "epoch": 0,
                                "data": {"position": "lsn:zz", "seq": 1}}).encode(),
    "unknown-position-kind": json.dumps({"version": 1, "epoch": 0,
                                         "data": {"position": "nope:1", "seq": 1}}).encode(),
    "seq-string": json.dumps({"version": 1, "epoch": 0, "data": {"seq": "abc"}}).encode(),
    "seq-negative": json.dumps({"version": 1, "epoch": 0, "data": {"seq": -5}}).encode(),
    "dumps-dict": json.dumps({"version": 1, "epoch": 0, "data": {"dumps": {}}}).encode(),
    "dump-empty": json.dumps({"version": 1, "epoch": 0, "data": {"dumps": [{}]}}).encode(),
    "dump-bad-state": json.dumps({"version": 1, "epoch": 0, "data": {"dumps": [
        {**GOOD_DUMP, "state": "exploded"}]}}).encode(),
    "dump-bad-table": json.dumps({"version": 1, "epoch": 0, "data": {"dumps": [
        {**GOOD_DUMP, "tables": [{**GOOD_DUMP["tables"][0], "table": 5}]}]}}).encode(),
}


def _assert_names_file_and_fix(error: StateError, path: Path) -> None:
    assert str(path) in error.message, error.message
    assert error.fix, error


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_a_damaged_state_file_gives_one_state_error(tmp_path: Path, name: str) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(DAMAGED[name])
    with pytest.raises(StateError) as loading:
        FileStateStore(path).load()
    _assert_names_file_and_fix(loading.value, path)
    db = MemoryDatabase()
    db.create_table("public.t", ["id"], ["id"])
    with pytest.raises(StateError) as running:
        Run(db, [ListOutput()], FileStateStore(path), settings=fast_settings()).go()
    _assert_names_file_and_fix(running.value, path)
    with pytest.raises(StateError) as saving:
        FileStateStore(path).save({"seq": 1}, 1, 0)
    _assert_names_file_and_fix(saving.value, path)
    assert path.read_bytes() == DAMAGED[name]  # never overwritten


def test_a_good_state_file_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"version": 4, "epoch": 0, "data": {
        "position": None, "seq": 7, "dumps": [GOOD_DUMP]}}))
    stored = FileStateStore(path).load()
    assert stored is not None and stored.version == 4 and stored.data["seq"] == 7


@pytest.mark.parametrize("name", ["empty", "list", "string-version", "dump-empty"])
def test_dblog_status_reports_a_damaged_state_file_without_a_traceback(
        tmp_path: Path, name: str) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(DAMAGED[name])
    assert str(path) in dblog_status_error(tmp_path, path)


def dblog_status_error(tmp_path: Path, state: Path) -> str:
    """What ``dblog status`` printed on stderr for the file state ``state``, checked to be a
    failure with a fix line and without a traceback."""
    config = tmp_path / "dblog.yaml"
    config.write_text(f"source: {{type: postgres, dsn: 'host=127.0.0.1 port=9'}}\n"
                      f"outputs: [{{type: jsonl, path: '{tmp_path / 'out.jsonl'}'}}]\n"
                      f"state: {{type: file, path: '{state}'}}\napi: {{enabled: false}}\n")
    done = subprocess.run([sys.executable, "-m", "dblog", "status", "--config", str(config)],
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    assert "fix:" in done.stderr and done.returncode != 0, done.stderr
    return done.stderr


def test_a_state_file_that_cannot_be_written_gives_a_state_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "state.json"
    store = FileStateStore(path)
    version = store.save({"seq": 1}, None, 0)

    def refuse(*_args: object) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(StateError) as saving:
        store.save({"seq": 2}, version, 0)
    _assert_names_file_and_fix(saving.value, path)
    assert "Permission denied" in saving.value.message


def test_a_state_file_deleted_while_running_is_named_not_taken_for_another_writer(
        tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    store = FileStateStore(path)
    version = store.save({"seq": 1}, None, 0)
    path.unlink()
    with pytest.raises(StateError) as saving:
        store.save({"seq": 2}, version, 0)
    assert not isinstance(saving.value, FencedError)
    assert "was removed" in saving.value.message
    _assert_names_file_and_fix(saving.value, path)
    assert not path.exists()  # not recreated behind the user's back


def test_a_state_file_that_cannot_be_read_gives_a_state_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real OS error on the read path (the state path is a folder: root reads any file, so
    permissions cannot refuse a read here), then a refused read (patched)."""
    folder = tmp_path / "state.json"
    folder.mkdir()
    with pytest.raises(StateError) as loading:
        FileStateStore(folder).load()
    _assert_names_file_and_fix(loading.value, folder)
    assert "is a folder" in loading.value.message
    path = tmp_path / "other.json"
    FileStateStore(path).save({"seq": 1}, None, 0)

    def refuse(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", refuse)
    with pytest.raises(StateError) as refused:
        FileStateStore(path).load()
    _assert_names_file_and_fix(refused.value, path)
    assert "Permission denied" in refused.value.message


def test_dblog_status_reports_an_unreadable_state_without_a_traceback(
        tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.mkdir()  # a real read error (root reads any file whatever its permissions)
    assert f"state.path {path} is a folder" in dblog_status_error(tmp_path, path)
