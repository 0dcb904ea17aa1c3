"""``dblog check`` reports format options that break the usual consumers: a changelog format's
default ``truncate: emit`` writes records Flink's formats refuse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dblog.app.checks import findings
from dblog.outputs.jsonl import JsonlConfig, JsonlOutput
from dblog.testing import MemoryConnector, MemoryDatabase


def _found(tmp_path: Path, fmt: str, options: dict[str, Any]) -> list[tuple[str, str]]:
    db = MemoryDatabase()
    db.create_table("public.t", ["id"], ["id"])
    output = JsonlOutput(JsonlConfig(path=str(tmp_path / "o.jsonl"), format=fmt,
                                     format_options=options))
    return [(f.level, f.message) for f in findings(MemoryConnector(db), [output])]


@pytest.mark.parametrize("fmt", ["debezium-json", "canal-json"])
def test_truncate_emit_is_a_warning_naming_the_format_and_the_fix(
        tmp_path: Path, fmt: str) -> None:
    default = [m for level, m in _found(tmp_path, fmt, {}) if level == "warning"]
    assert len(default) == 1 and default[0].startswith(f"{fmt}: a TRUNCATE")
    assert "Flink" in default[0]
    for policy in ("skip", "fail"):
        assert not [m for _, m in _found(tmp_path, fmt, {"truncate": policy}) if "TRUNCATE" in m]


def test_the_native_format_has_no_such_finding(tmp_path: Path) -> None:
    assert not [m for _, m in _found(tmp_path, "native", {}) if "TRUNCATE" in m]
