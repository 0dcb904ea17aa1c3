"""``dblog check`` on an operator's first configuration: it said ``OK`` (exit 0) for
``initial_dumps`` naming a table that does not exist, which ``dblog run`` then refused at its
first start; and an output that fails two of its checks the same way (an unreachable SQL
target) printed the same ERROR twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dblog.app import plugins
from dblog.app.checks import findings
from dblog.app.cli import main
from dblog.spi import Finding
from dblog.testing import MemoryConnector, MemoryDatabase


def _check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
           capsys: pytest.CaptureFixture[str], extra: str) -> tuple[int, str]:
    db = MemoryDatabase()
    db.create_table("public.orders", ["id"], ["id"])
    monkeypatch.setattr(plugins, "build_connector", lambda *_: MemoryConnector(db))
    path = tmp_path / "dblog.yaml"
    path.write_text("source: {type: postgres, dsn: 'host=x'}\n"
                    f"outputs: [{{type: jsonl, path: {tmp_path}/o.jsonl}}]\n" + extra)
    status = main(["check", "-c", str(path)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return status, out


def test_an_initial_dump_of_an_unknown_table_is_an_error_of_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    status, out = _check(tmp_path, monkeypatch, capsys,
                         "initial_dumps: [{tables: [public.orders]}, {tables: [public.nope]}]\n")
    assert status == 1, out
    errors = [line for line in out.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and "initial_dumps[1]" in errors[0] and "public.nope" in errors[0]
    assert "initial_dumps_skip_unavailable" in out.split(errors[0], 1)[1]


def test_a_skipped_initial_dump_table_is_a_warning_and_known_ones_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    status, out = _check(tmp_path, monkeypatch, capsys,
                         "initial_dumps: [{tables: [public.orders, public.nope]}, "
                         "{tables: null}]\nengine: {initial_dumps_skip_unavailable: true}\n")
    assert status == 0, out
    warnings = [line for line in out.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and "public.nope" in warnings[0], out
    status, out = _check(tmp_path, monkeypatch, capsys,
                         "initial_dumps: [{tables: [public.orders]}]\n")
    assert status == 0 and "ERROR" not in out and "WARNING" not in out, out


class TwiceFailing:
    """An output whose reachability and table checks fail alike (as the SQL output's do)."""

    def __init__(self) -> None:
        self.name = "sql:postgresql://u:***@h:1/x"

    def check(self) -> list[Finding]:
        return [Finding("error", f"{self.name}: connection refused", "make it reachable")]

    def check_tables(self, tables: Any) -> list[Finding]:
        return self.check()


def test_the_same_finding_is_printed_once() -> None:
    db = MemoryDatabase()
    db.create_table("public.orders", ["id"], ["id"])
    found = findings(MemoryConnector(db), [TwiceFailing()])  # type: ignore[list-item]
    assert [(f.level, f.message) for f in found if f.level == "error"] == [
        ("error", "sql:postgresql://u:***@h:1/x: connection refused")]


def test_a_state_path_run_cannot_write_is_an_error_of_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    for path in (f"{blocker}/state.json", str(tmp_path)):
        status, out = _check(tmp_path, monkeypatch, capsys, f"state: {{path: '{path}'}}\n")
        errors = [line for line in out.splitlines() if line.startswith("ERROR")]
        assert status == 1 and len(errors) == 1, out
        assert errors[0].startswith(f"ERROR    state.path {path}: "), out
        assert "fix: " in out.split(errors[0], 1)[1]
    status, out = _check(tmp_path, monkeypatch, capsys,
                         f"state: {{path: '{tmp_path}/new/folder/state.json'}}\n")
    assert status == 0 and "ERROR" not in out, out


def test_an_unset_api_token_variable_is_an_error_of_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("H25_CHECK_TOKEN", raising=False)
    status, out = _check(tmp_path, monkeypatch, capsys, "api: {token_env: H25_CHECK_TOKEN}\n")
    assert status == 1 and "ERROR    api.token_env names H25_CHECK_TOKEN" in out, out
    assert "fix: export H25_CHECK_TOKEN=" in out
    monkeypatch.setenv("H25_CHECK_TOKEN", "s3cret-token")
    status, out = _check(tmp_path, monkeypatch, capsys, "api: {token_env: H25_CHECK_TOKEN}\n")
    assert status == 0 and "s3cret-token" not in out, out
