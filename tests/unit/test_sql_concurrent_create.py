"""A replica table created by someone else between the SQL output's look for it and its
CREATE TABLE (another pipeline on the target, a deposed leader still starting while its
standby took over) is used as an existing table, not a fatal "table already exists"
(review finding: failed before the fix)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine.reflection import Inspector

from dblog.core.model import ChangeEvent, Op, TableId, TableInfo
from tests.contract.test_replica_output_contract import B, _numbered
from tests.replica_targets import SqlTarget, int_info
from tests.unit.test_replica_sim import lsn


def _insert(key: int, txn: int) -> list[ChangeEvent]:
    base = 0x100 * txn
    return [ChangeEvent(Op.BEGIN, None, position=lsn(base)),
            ChangeEvent(Op.INSERT, B, (key,), position=lsn(base + 1),
                        after={"id": key, "v": txn, "blob": "b"}),
            ChangeEvent(Op.COMMIT, None, position=lsn(base + 2))]


def test_a_table_created_meanwhile_by_another_writer_is_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    infos: dict[TableId, TableInfo] = {B: int_info(B)}
    target = SqlTarget("sqlite", f"sqlite:///{tmp_path / 'replica.db'}", infos.get)
    other = target.new_output(pipeline="other")
    other.open(0)
    other.write(_numbered([_insert(1, 1)]))
    assert other.flush() == 3  # the other writer created b and b_live

    real = Inspector.has_table
    looks = {"n": 0}

    def not_yet(self: Inspector, name: str, schema: str | None = None, **kw: Any) -> bool:
        looks["n"] += 1
        return False if looks["n"] == 1 and name == "b" else real(self, name, schema, **kw)

    monkeypatch.setattr(Inspector, "has_table", not_yet)
    out = target.new_output()
    out.open(0)
    out.write(_numbered([_insert(1, 1), _insert(2, 2)]))
    assert out.flush() == 6  # was: FatalOutputError "table b already exists"
    assert target.live(B) == {(1,): {"id": 1, "v": 1, "blob": "b"},
                              (2,): {"id": 2, "v": 2, "blob": "b"}}
    with target.engine.connect() as conn:
        views = conn.execute(sa.text("SELECT count(*) FROM sqlite_master WHERE type = 'view'"))
        assert views.scalar() == 1
    target.close()
