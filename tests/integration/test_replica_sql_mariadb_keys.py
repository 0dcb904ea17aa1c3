"""Text key columns of a SQL replica on MariaDB: keys the source keeps apart stay apart, a key
the column cannot hold is refused with the fix (never truncated), and a key column created by
an older dblog with a collation that merges keys is refused at start with the fix.

A PostgreSQL source keeps ``'a'``, ``'A'`` and ``'a '`` apart (its text equality is byte
equality); MariaDB's ``utf8mb4_general_ci`` (the server default) merges all three and
``utf8mb4_bin`` (PAD SPACE) still merges ``'a'`` and ``'a '``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from dblog.core.model import ChangeEvent, ColumnInfo, Op, TableId, TableInfo
from dblog.errors import FatalOutputError
from dblog.outputs.sql import SqlOutput
from tests.integration.mysql_fixtures import maria_admin_dsn
from tests.replica_targets import SqlTarget, make_target
from tests.unit.test_replica_sim import lsn

__all__ = ["maria_admin_dsn"]
T = TableId("public", "docs")
INFO = TableInfo(T, (ColumnInfo("k", "text"), ColumnInfo("v", "bigint")), ("k",),
                 extra={"flavour": "postgresql"})
KEYS = ["a", "A", "a ", "a  ", " a", "\u00e4", "b"]


@pytest.fixture()
def maria(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlTarget]:
    target = make_target("mariadb", request, tmp_path, {T: INFO}.get)
    assert isinstance(target, SqlTarget)
    try:
        yield target
    finally:
        target.close()


def inserts(keys: Sequence[str], first_txn: int = 1) -> list[ChangeEvent]:
    """One transaction per key (``v`` = its index), sequence numbers from 1."""
    events: list[ChangeEvent] = []
    for i, key in enumerate(keys):
        base = 0x100 * (first_txn + i)
        events += [ChangeEvent(Op.BEGIN, None, position=lsn(base)),
                   ChangeEvent(Op.INSERT, T, (key,), None, {"k": key, "v": i}, lsn(base - 1)),
                   ChangeEvent(Op.COMMIT, None, position=lsn(base))]
    for seq, event in enumerate(events, 1):
        event.seq = seq
    return events


def opened(target: SqlTarget, url: str | None = None) -> SqlOutput:
    output = target.new_output(url=url or target.url)
    assert isinstance(output, SqlOutput)
    output.open(0)
    return output


def test_keys_that_differ_in_case_or_trailing_spaces_stay_apart(maria: SqlTarget) -> None:
    output = opened(maria)
    output.write(inserts(KEYS))
    output.flush()
    assert output.live_rows(T) == {(k,): {"k": k, "v": i} for i, k in enumerate(KEYS)}


@pytest.mark.parametrize("sql_mode", ["strict", "lenient"])
def test_a_key_longer_than_its_column_is_refused_with_the_fix(maria: SqlTarget,
                                                              sql_mode: str) -> None:
    """Strict or not (a lenient server truncates with a warning), nothing is cut."""
    url = maria.url if sql_mode == "strict" else maria.url + "&init_command=SET sql_mode=''"
    output = opened(maria, url=url)
    long = "x" * 300
    output.write(inserts(["short", long]))
    with pytest.raises(FatalOutputError) as raised:
        output.flush()
    error = raised.value
    assert "docs" in error.message and "column k" in error.message and "300" in error.message
    assert error.fix is not None and "VARCHAR" in error.fix and "ALTER TABLE" in error.fix
    assert maria.live(T) == {}  # nothing of the flush was committed


OLD_DDL = ("CREATE TABLE docs (k VARCHAR(255) COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, "
           "v BIGINT, _dblog_major BIGINT NOT NULL, _dblog_minor BIGINT NOT NULL, "
           "_dblog_deleted BOOL NOT NULL)")
"""The replica table as dblog created it before key columns were NO PAD."""


def test_an_old_key_column_that_merges_keys_is_refused_with_the_fix(maria: SqlTarget) -> None:
    maria.execute(OLD_DDL)
    output = opened(maria)
    output.write(inserts(KEYS))
    with pytest.raises(FatalOutputError, match="utf8mb4_bin") as raised:
        output.flush()
    fix = raised.value.fix or ""
    assert "utf8mb4_nopad_bin" in fix
    alter = re.search(r"ALTER TABLE .*? NOT NULL", fix)
    assert alter is not None, fix
    maria.execute(alter.group(0))  # the fix as the message gives it
    again = opened(maria)
    again.write(inserts(KEYS))
    again.flush()
    assert again.live_rows(T) == {(k,): {"k": k, "v": i} for i, k in enumerate(KEYS)}


def test_dblog_check_reports_an_old_key_column_as_start_refuses_it(maria: SqlTarget) -> None:
    """``dblog check`` names the refusal, with the same message and fix, before a run; a
    captured table whose replica table does not exist yet gets nothing."""
    later = TableInfo(TableId("public", "later"), INFO.columns, ("k",), extra=INFO.extra)
    maria.execute(OLD_DDL)
    checker = maria.new_output()
    assert isinstance(checker, SqlOutput)
    findings = checker.check_tables([INFO, later])
    output = opened(maria)
    output.write(inserts(KEYS))
    with pytest.raises(FatalOutputError, match="utf8mb4_bin") as raised:
        output.flush()
    assert [(f.level, f.message, f.fix) for f in findings] == [
        ("error", raised.value.message, raised.value.fix)]
    assert [f.level for f in checker.check_tables([later])] == ["ok"]
