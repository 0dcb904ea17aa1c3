"""A first hour's path mistakes (a jsonl or Delta output path that cannot be written, a
``state.path`` that is a folder): each is one error naming the field, the path and the fix,
not a traceback or a fix about something else."""

from __future__ import annotations

from pathlib import Path

import pytest

from dblog.errors import FatalOutputError, StateError
from dblog.outputs.delta import DeltaOutput
from dblog.outputs.jsonl import JsonlOutput
from dblog.state.file import FileStateStore


def _unwritable(tmp_path: Path) -> list[str]:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    return ["/proc/no-such-folder/out.jsonl", str(folder)]


def test_a_jsonl_path_that_cannot_be_written_is_one_error_with_the_fix(tmp_path: Path) -> None:
    for path in _unwritable(tmp_path):
        with pytest.raises(FatalOutputError) as caught:
            JsonlOutput({"path": path}).open(0)
        assert path in caught.value.message and "outputs" in caught.value.message
        assert caught.value.fix is not None and "path" in caught.value.fix, caught.value


def test_a_delta_path_that_cannot_be_written_names_the_fix() -> None:
    path = "/proc/no-such-folder/delta"
    with pytest.raises(FatalOutputError) as caught:
        DeltaOutput({"path": path}).open(0)
    assert path in caught.value.message
    assert caught.value.fix is not None and "outputs" in caught.value.fix, caught.value


def test_a_state_path_that_is_a_folder_says_so_and_names_state_path(tmp_path: Path) -> None:
    with pytest.raises(StateError) as caught:
        FileStateStore(tmp_path).save({}, None, 0)
    assert "state.path" in caught.value.message and "is a folder" in caught.value.message
    assert caught.value.fix is not None and "file" in caught.value.fix
    assert "permissions" not in caught.value.fix, caught.value
    with pytest.raises(StateError) as caught:
        FileStateStore(tmp_path).load()
    assert "state.path" in caught.value.message and "is a folder" in caught.value.message


def test_dblog_check_reports_a_jsonl_path_that_run_cannot_write(tmp_path: Path) -> None:
    """check said OK for it, then run refused it."""
    for path in _unwritable(tmp_path):
        [finding] = JsonlOutput({"path": path}).check()
        assert finding.level == "error" and path in finding.message, finding
        assert finding.fix is not None and "path" in finding.fix
    assert JsonlOutput({"path": str(tmp_path / "new" / "out.jsonl")}).check() == []
    assert not (tmp_path / "new").exists()  # a check changes nothing
