"""Transaction boundaries the binlog reader draws from Query events (MySQL GTIDs, fed as
mysql-replication events): a ROLLBACK query (a group that changed a non-transactional table in a
STATEMENT/MIXED session) ends its transaction like COMMIT, and the DDL groups after it commit
each at its own GTID."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from pymysqlreplication.event import GtidEvent, QueryEvent

from dblog.connectors.mysql import positions
from dblog.connectors.mysql.binlog import MysqlLogReader
from dblog.core.model import ChangeEvent, LogItem, Op, TableId

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


class Decoder:
    def ddl(self, *args: object) -> list[LogItem]:
        return []

    def captured(self, table: TableId) -> bool:
        return True


def _event(cls: Any, **fields: Any) -> Any:
    event = cls.__new__(cls)
    event.__dict__.update(fields)
    return event


def _gtid(gno: int) -> Any:
    return _event(GtidEvent, sid=bytes.fromhex(UUID.replace("-", "")), gno=gno, timestamp=1)


def _query(text: str) -> Any:
    return _event(QueryEvent, query=text, schema=b"d", timestamp=1)


def test_a_rollback_query_ends_its_transaction_and_later_ddl_commits() -> None:
    reader = MysqlLogReader(endpoint=None, server_id=1, flavor=None,  # type: ignore[arg-type]
                            decoder=Decoder(), current_position=lambda: None)  # type: ignore
    reader._committed = positions.MysqlGtidSet.parse(f"{UUID}:1-4")
    reader._stream = SimpleNamespace(log_file="bin.000001", table_map={})
    out: list[LogItem] = []
    for event, pos in [(_gtid(5), 100), (_query("BEGIN"), 150), (_query("ROLLBACK"), 200),
                       (_gtid(6), 300), (_query("ALTER TABLE t ADD c int"), 400),
                       (_gtid(7), 500), (_query("DROP TABLE u"), 600)]:
        reader._on_event(event, out, SimpleNamespace(log_pos=pos))
    marks = [(e.op, str(e.position)) for e in out if isinstance(e, ChangeEvent)]
    assert [op for op, _ in marks] == [Op.BEGIN, Op.COMMIT] * 3
    commits = [p for op, p in marks if op is Op.COMMIT]
    assert commits == [f"{UUID}:1-{n}" for n in (5, 6, 7)]
