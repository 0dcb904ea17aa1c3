"""``dblog check`` reports format options that break the usual consumers (a changelog format's
default ``truncate: emit`` writes records Flink's formats refuse) and gives outputs that check
the captured tables (an existing replica table they would refuse) those tables' metadata."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from dblog.app.checks import findings
from dblog.core.model import ChangeEvent, TableId, TableInfo
from dblog.errors import DumpRequestError
from dblog.outputs.jsonl import JsonlConfig, JsonlOutput
from dblog.spi import Finding
from dblog.spi.findings import TableCheckable
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


class TableChecking:
    """An output with the TableCheckable ability: records the metadata it was given."""

    name = "checking"

    def __init__(self) -> None:
        self.given: list[TableInfo] = []

    def open(self, committed_seq: int) -> None: ...

    def write(self, events: Sequence[ChangeEvent]) -> None: ...

    def flush(self) -> int:
        return 0

    def close(self) -> None: ...

    def check_tables(self, tables: Sequence[TableInfo]) -> list[Finding]:
        self.given = list(tables)
        return [Finding("error", f"{t.table}: refused") for t in tables]


def test_check_gives_table_checking_outputs_every_captured_tables_metadata() -> None:
    db = MemoryDatabase()
    for name in ("public.a", "public.b"):
        db.create_table(name, ["id", "v"], ["id"])
    output = TableChecking()
    assert isinstance(output, TableCheckable)
    found = findings(MemoryConnector(db), [output])
    assert sorted(str(i.table) for i in output.given) == ["public.a", "public.b"]
    assert all(i.key_columns == ("id",) for i in output.given)
    assert sorted(f.message for f in found if f.level == "error") == [
        "public.a: refused", "public.b: refused"]


def test_a_table_whose_metadata_cannot_be_read_is_left_to_the_sources_check(
        monkeypatch: pytest.MonkeyPatch) -> None:
    db = MemoryDatabase()
    for name in ("public.a", "public.b"):
        db.create_table(name, ["id", "v"], ["id"])
    connector = MemoryConnector(db)
    reader_class = type(connector.chunk_reader())
    table_info = reader_class.table_info

    def without_b(self: Any, table: TableId, key_columns: Any = None) -> TableInfo:
        if table.name == "b":
            raise DumpRequestError(f"{table} has no primary key")
        return table_info(self, table, key_columns)

    monkeypatch.setattr(reader_class, "table_info", without_b)
    output = TableChecking()
    findings(connector, [output])
    assert [str(i.table) for i in output.given] == ["public.a"]
