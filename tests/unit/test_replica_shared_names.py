"""Two source tables never share one replica table: tables of the same name in two schemas
under a name template without ``{schema}`` (the SQL output's default ``{table}``) are refused
with the fix, not written into one table where their keys overwrite each other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dblog.core.model import ChangeEvent, ColumnInfo, Op, TableId, TableInfo
from dblog.errors import FatalOutputError
from dblog.outputs.delta import DeltaOutput
from dblog.outputs.sql import SqlOutput
from tests.unit.test_replica_sim import lsn

SHOP, ARCHIVE = TableId("shop", "orders"), TableId("archive", "orders")
INFOS = {t: TableInfo(t, (ColumnInfo("id", "integer"), ColumnInfo("v", "text")), ("id",))
         for t in (SHOP, ARCHIVE)}


def _both() -> list[ChangeEvent]:
    return [ChangeEvent(Op.BEGIN, None, position=lsn(0x1000), seq=1),
            ChangeEvent(Op.INSERT, SHOP, (1,), None, {"id": 1, "v": "shop"}, lsn(0x900), seq=2),
            ChangeEvent(Op.INSERT, ARCHIVE, (1,), None, {"id": 1, "v": "archive"}, lsn(0x901),
                        seq=3),
            ChangeEvent(Op.COMMIT, None, position=lsn(0x1000), seq=4)]


def _sql(tmp_path: Path, **config: Any) -> SqlOutput:
    out = SqlOutput({"type": "sql", "url": f"sqlite:///{tmp_path / 'r.db'}", **config},
                    tables=INFOS.get)
    out.bind("p", 1)
    out.open(0)
    return out


def test_sql_default_names_refuse_one_name_in_two_schemas(tmp_path: Path) -> None:
    out = _sql(tmp_path)
    out.write(_both())
    with pytest.raises(FatalOutputError, match=r"shop\.orders and archive\.orders") as caught:
        out.flush()
    assert caught.value.fix is not None and "table_name" in caught.value.fix
    assert "{schema}_{table}" in caught.value.fix


def test_sql_views_are_told_apart_too(tmp_path: Path) -> None:
    out = _sql(tmp_path, table_name="{schema}_{table}")  # the view is still {table}_live
    out.write(_both())
    with pytest.raises(FatalOutputError, match="orders_live"):
        out.flush()


def test_sql_names_with_the_schema_keep_both(tmp_path: Path) -> None:
    out = _sql(tmp_path, table_name="{schema}_{table}", view_name="{schema}_{table}_live")
    out.write(_both())
    assert out.flush() == 4
    assert out.live_rows(SHOP) == {(1,): {"id": 1, "v": "shop"}}
    assert out.live_rows(ARCHIVE) == {(1,): {"id": 1, "v": "archive"}}


def test_delta_refuses_a_table_path_shared_by_two_sources(tmp_path: Path) -> None:
    out = DeltaOutput({"type": "delta", "path": str(tmp_path / "d"), "table_path": "{table}",
                       "commit_interval_s": 0}, tables=INFOS.get)
    out.bind("p", 1)
    out.open(0)
    out.write(_both())
    with pytest.raises(FatalOutputError, match="would share the Delta table") as caught:
        out.flush()
    assert caught.value.fix is not None and "table_path" in caught.value.fix
