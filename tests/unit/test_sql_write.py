"""Unit tests of :mod:`dblog.outputs.sql_write` on SQLite: the statements a flush sends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from dblog.connectors.postgres.positions import Lsn
from dblog.core.model import ChangeEvent, Op, TableId
from dblog.outputs.sql import SqlOutput
from tests.replica_targets import int_info

T = TableId("public", "items")


@pytest.fixture()
def statements() -> Iterator[list[str]]:
    """The text of every statement any engine sends while the test runs."""
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", record)
    yield sent
    sa.event.remove(sa.engine.Engine, "before_cursor_execute", record)


def dump_rows(first: int, count: int, seq: int) -> list[ChangeEvent]:
    return [ChangeEvent(Op.READ, T, (i,), after={"id": i, "v": i, "blob": "x"},
                        position=Lsn(100 + first), seq=seq + n)
            for n, i in enumerate(range(first, first + count))]


def test_flushes_of_every_size_use_few_distinct_upsert_statements(
        tmp_path: Path, statements: list[str]) -> None:
    """The driver caches each distinct statement: one text per leftover row count grew the
    memory with N (a 1.6M-row dump: 30 sizes, SQLite memory 20 -> 64 MB). Flushes of 1..60
    rows must use the power-of-two statements only, and write every row."""
    output = SqlOutput({"url": f"sqlite:///{tmp_path}/r.db"}, tables={T: int_info(T)}.get)
    output.bind("p", 1)
    output.open(0)
    first = seq = 1
    for size in range(1, 61):
        output.write(dump_rows(first, size, seq))
        assert output.flush() == seq + size - 1
        first, seq = first + size, seq + size
    upserts = {s for s in statements if s.startswith("INSERT INTO items ")}
    assert len(upserts) == 6  # 1, 2, 4, 8, 16, 32 rows
    assert len(output.live_rows(T)) == first - 1 == sum(range(1, 61))
    output.close()
