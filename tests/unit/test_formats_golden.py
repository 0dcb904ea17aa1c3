"""Byte-level golden records of debezium-json and canal-json for a few events of each source.

Each file under tests/golden/<format>/ holds the records ``encode_records`` gives for one case
(debezium-json's transaction records included), one per line: the key bytes, a tab, the value
bytes (``null`` for a missing key or a tombstone). A change in any byte
fails; after a deliberate change of a format, regenerate with ``DBLOG_UPDATE_GOLDEN=1`` and
review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from dblog.connectors.mysql.positions import BinlogPosition, MariadbGtid
from dblog.connectors.postgres.positions import Lsn
from dblog.core.model import ChangeEvent, ColumnInfo, EncodedRow, Op, TableId, TableInfo
from dblog.formats.base import Record
from dblog.formats.canal import CanalFormat
from dblog.formats.changelog import ChangelogFormat
from dblog.formats.debezium import DebeziumFormat

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
CLOCK = 1714564861.5  # 2024-05-01 12:01:01.5 UTC, the processing time of every record
PG = TableInfo(TableId("public", "orders"), (
    ColumnInfo("id", "integer"), ColumnInfo("amount", "numeric(12,2)"),
    ColumnInfo("placed", "timestamp with time zone"), ColumnInfo("doc", "jsonb"),
    ColumnInfo("raw", "bytea")), ("id",))
MY = TableInfo(TableId("shop", "orders"), (
    ColumnInfo("id", "bigint(20) unsigned"), ColumnInfo("amount", "decimal(12,2)"),
    ColumnInfo("placed", "datetime(3)"), ColumnInfo("state", "enum('new','paid')"),
    ColumnInfo("raw", "varbinary(8)")), ("id",))
ROW_PG = {"id": 1, "amount": "9.90", "placed": "2024-05-01 11:59:00.25+00",
          "doc": '{"a": 1}', "raw": "00ff"}
ROW_MY = {"id": 18446744073709551615, "amount": "9.90", "placed": "2024-05-01 11:59:00.250000",
          "state": "new", "raw": "00ff"}
TS = "2024-05-01 12:00:00.123456+00"


def _tx(txid: int, lsn: int, *events: ChangeEvent) -> list[ChangeEvent]:
    return [ChangeEvent(Op.BEGIN, None, txid=txid, commit_ts=TS, position=Lsn(lsn), seq=1),
            *events,
            ChangeEvent(Op.COMMIT, None, txid=txid, commit_ts=TS, position=Lsn(lsn + 0x100),
                        seq=len(events) + 2)]


def _pg(op: Op, seq: int, **fields: object) -> ChangeEvent:
    return ChangeEvent(op, PG.table, position=Lsn((0x16 << 32) | 0xB374D848), txid=731,
                       commit_ts=TS, seq=seq, **fields)  # type: ignore[arg-type]


CASES: dict[str, tuple[TableInfo, list[ChangeEvent]]] = {
    "pg_insert": (PG, _tx(731, 0x10, _pg(Op.INSERT, 2, key=(1,), after=dict(ROW_PG)))),
    "pg_update": (PG, _tx(731, 0x10, _pg(Op.UPDATE, 2, key=(1,), before=dict(ROW_PG),
                                         after={**ROW_PG, "amount": "10.00"}))),
    "pg_key_change": (PG, _tx(731, 0x10, _pg(Op.UPDATE, 2, key=(2,), before=dict(ROW_PG),
                                             after={**ROW_PG, "id": 2}, old_key=(1,)))),
    "pg_delete": (PG, _tx(731, 0x10, _pg(Op.DELETE, 2, key=(1,), before=dict(ROW_PG)))),
    "pg_read": (PG, [ChangeEvent(Op.READ, PG.table, (1,), None,
                                 EncodedRow(orjson.dumps(ROW_PG)), Lsn(0x2000), dump_id="d1",
                                 seq=9)]),
    "pg_truncate": (PG, _tx(731, 0x20, _pg(Op.TRUNCATE, 2))),
    "mariadb_update": (MY, [ChangeEvent(
        Op.UPDATE, MY.table, (ROW_MY["id"],), dict(ROW_MY), {**ROW_MY, "state": "paid"},
        MariadbGtid(((0, 1, 625),)), 625, "2024-05-01 12:00:00+00", seq=4)]),
    "mysql_binlog_delete": (MY, [ChangeEvent(
        Op.DELETE, MY.table, (ROW_MY["id"],), dict(ROW_MY), None,
        BinlogPosition("mysql-bin.000003", 4567), (3 << 32) | 4567, "2024-05-01 12:00:00+00",
        seq=5)]),
}


def _encode(fmt: ChangelogFormat, info: TableInfo, events: list[ChangeEvent]) -> bytes:
    records: list[Record] = []
    for event in events:
        records.extend(fmt.encode_records(event, info if event.table else None))
    return b"".join((r.key or b"null") + b"\t" + (r.value or b"null") + b"\n" for r in records)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", ["debezium-json", "canal-json"])
def test_records_equal_the_golden_bytes(name: str, case: str) -> None:
    info, events = CASES[case]
    fmt: ChangelogFormat = DebeziumFormat(clock=lambda: CLOCK, database="shop") \
        if name == "debezium-json" else CanalFormat(clock=lambda: CLOCK)
    data = _encode(fmt, info, events)
    path = GOLDEN / name / f"{case}.txt"
    if os.environ.get("DBLOG_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    assert path.exists(), f"{path} is missing (DBLOG_UPDATE_GOLDEN=1 writes it)"
    assert data == path.read_bytes()
