"""``dblog retire`` removes what a pipeline created in the source (slot, its watermark row, the
watermark table once no pipeline uses it), only after confirmation, and refuses while the slot
is in use."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import pytest

from dblog.app.cli_retire import retire
from dblog.app.config import load_config
from dblog.app.plugins import build_connector

from .sources import Kit, kit

pytestmark = pytest.mark.integration
WATERMARK = uuid.uuid4().hex[:8]
__all__ = ["kit"]


def _source(kit: Kit, name: str) -> dict[str, object]:
    """A watermark table of this test's own: on a MariaDB server the default one (database
    ``dblog``) is shared by every test's pipelines."""
    return {**kit.source_config(name), "watermark_table": f"dblog.wm_{WATERMARK}"}


def _config(kit: Kit, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps({"name": name, "source": _source(kit, name),
                                "outputs": [{"type": "jsonl", "path": str(tmp_path / "o")}],
                                "state": {"path": str(tmp_path / f"{name}.json")}}))
    return path


def test_retire_removes_the_pipelines_objects_after_confirmation(
        kit: Kit, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kit.create_schema(rows=10)
    first, second = (load_config(_config(kit, tmp_path, n)) for n in ("ret_a", "ret_b"))
    for config in (first, second):  # each pipeline's watermark row (and PostgreSQL slot)
        connector = build_connector(config.source, config.name)
        connector.prepare()
        connector.close()
    assert retire(first, yes=False, stdin=io.StringIO("no\n")) == 1
    out = capsys.readouterr().out
    assert "not confirmed: nothing removed" in out and "row 'ret_a'" in out
    assert retire(first, yes=False, stdin=io.StringIO("ret_a\n")) == 0
    out = capsys.readouterr().out
    assert "removed row 'ret_a'" in out and "removed table" not in out  # ret_b still uses it
    if kit.kind == "postgres":
        assert "removed replication slot ret_a" in out
    assert retire(second, yes=True) == 0
    out = capsys.readouterr().out
    assert "removed row 'ret_b'" in out and "removed table" in out
    assert retire(second, yes=True) == 0
    assert "nothing to remove" in capsys.readouterr().out
