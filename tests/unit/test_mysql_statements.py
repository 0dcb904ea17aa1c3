"""Query events read by the binlog reader (statements.py): which statements are row changes
logged as statements, and which tables they write (a captured one stops the stream)."""

from __future__ import annotations

import pytest

from dblog.connectors.mysql.fastpath import _HEADER, FastPath
from dblog.connectors.mysql.statements import (
    Kind,
    kind_of,
    opens_transaction,
    refuse_statement_rows,
    written_tables,
)
from dblog.core.model import TableId
from dblog.errors import FatalSourceError


@pytest.mark.parametrize(("query", "kind"), [
    ("BEGIN", Kind.BEGIN), ("COMMIT", Kind.COMMIT), ("SAVEPOINT a", Kind.SKIP),
    ("CREATE TABLE t (id int)", Kind.DDL), ("ALTER TABLE t ADD c int", Kind.DDL),
    ("insert into t values (1)", Kind.DML), ("/* x */ UPDATE t SET a = 1", Kind.DML),
    ("DELETE FROM t", Kind.DML), ("REPLACE INTO t VALUES (1)", Kind.DML),
    ("ROLLBACK", Kind.COMMIT),
    ("SET STATEMENT max_statement_time=100 FOR UPDATE t SET a = 1", Kind.DML),
    ("SET STATEMENT lock_wait_timeout=5 FOR ALTER TABLE t ADD c int", Kind.DDL)])
def test_kinds(query: str, kind: Kind) -> None:
    assert kind_of(query) is kind


@pytest.mark.parametrize(("query", "tables"), [
    ("INSERT INTO t VALUES (1)", ["d.t"]),
    ("INSERT LOW_PRIORITY IGNORE INTO `o`.`t t` (a, b) VALUES (1, 2)", ["o.t t"]),
    ("insert into t select * from u", ["d.t"]),
    ("INSERT INTO t SET a = 'x.y', b = 2", ["d.t"]),
    ("REPLACE INTO o.t VALUES (1)", ["o.t"]),
    ("UPDATE t SET v = 11 WHERE id = 1", ["d.t"]),
    ("UPDATE IGNORE a JOIN o.b ON a.id = b.id SET a.v = 1", ["d.a", "o.b", "a.id", "b.id"]),
    ("DELETE FROM t WHERE id = 1", ["d.t"]),
    ("DELETE QUICK FROM o.t", ["o.t"]),
    ("DELETE t1, t2 FROM t1 INNER JOIN t2 WHERE t1.id = t2.id", ["d.t1", "d.t2", "d.t1",
                                                                   "d.t2"]),
    ("CREATE TABLE t (id int)", [])])
def test_written_tables(query: str, tables: list[str]) -> None:
    assert [str(t) for t in written_tables(query, "d")] == tables


def test_a_statement_on_a_captured_table_is_refused_with_the_fix() -> None:
    def captured(table: TableId) -> bool:
        return table.schema == "d" and table.name == "t"

    refuse_statement_rows("INSERT INTO other VALUES (1)", "d", captured)  # not ours
    with pytest.raises(FatalSourceError) as caught:
        refuse_statement_rows("UPDATE t SET v = 1", "d", captured)
    assert "d.t" in caught.value.message and "UPDATE t SET v = 1" in caught.value.message
    assert "SET GLOBAL binlog_format = 'ROW'" in (caught.value.fix or "")


def test_mysql_create_table_select_opens_a_transaction() -> None:
    assert opens_transaction("CREATE TABLE `t` (\n  `a` int\n) START TRANSACTION")
    assert not opens_transaction("CREATE TABLE t (a int)")


@pytest.mark.parametrize("flags", [0x01, 0x0C])
def test_the_fast_path_passes_the_mariadb_gtid_flags(flags: int) -> None:
    seen: list[tuple[int, ...]] = []
    fast = FastPath(lambda *args: None, lambda: False, lambda *args: seen.append(args))
    body = (7).to_bytes(8, "little") + (2).to_bytes(4, "little") + bytes([flags])
    packet = b"\x00" + _HEADER.pack(1700000000, 162, 1, 19 + len(body), 400, 0)[1:] + body
    assert fast.intercept(packet)
    assert seen == [(2, 1, 7, 1700000000, flags)]
