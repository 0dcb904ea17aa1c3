"""canal-json: a consumer written from Canal's published flat-message fields rebuilds the source
table from generated streams; ``old`` holds the changed columns only; key changes, before
images, TOAST, truncate and markers follow the changelog rules."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dblog.connectors.mysql.positions import MariadbGtid
from dblog.connectors.postgres.positions import Lsn
from dblog.core.model import ChangeEvent, EncodedRow, Op, TableId
from dblog.errors import FatalOutputError
from dblog.formats.base import Record, format_by_name
from dblog.formats.canal import CanalFormat
from dblog.spi.source import LoggedImages
from tests.changelog_consumers import CanalConsumer, ConsumerError, apply_lines
from tests.changelog_streams import actions, expected_rows, run, table_info


@pytest.mark.parametrize("family", ["postgresql", "mysql"])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_canal_consumer_rebuilds_the_table_from_records_and_lines(
        family: str, data: st.DataObject) -> None:
    model = run(family, data.draw(actions(family)))
    info = table_info(family)
    consumer = CanalConsumer(family)
    records: list[Record] = []
    fmt = CanalFormat()
    for event in model.events:
        records.extend(fmt.encode_records(event, info if event.table else None))
    for record in records:
        consumer.apply(record.key, record.value)
    assert consumer.rows == expected_rows(model)
    from_lines = CanalConsumer(family)
    apply_lines(from_lines, CanalFormat().encode_lines(model.events, lambda t: info).splitlines())
    assert from_lines.rows == expected_rows(model)
    assert all(r.value is not None for r in records)  # Canal has no tombstones
    for record in records:
        message = orjson.loads(record.value or b"")
        assert all(isinstance(v, str) or v is None for row in message["data"] or ()
                   for v in row.values())


ROW = {"id": 1, "tag": "a", "v": "x", "n": "1.00", "ts": "2024-01-01 00:00:00.5",
       "big": "B" * 30, "raw": "00ff"}


def _update(before: dict[str, Any] | None, after: dict[str, Any],
            unchanged: tuple[str, ...] = (), old_key: tuple[Any, ...] | None = None
            ) -> ChangeEvent:
    return ChangeEvent(Op.UPDATE, TableId("public", "items"), (after["id"], after["tag"]),
                       before, after, Lsn(0x10), 7, "2024-05-01 12:00:00.25+00", old_key,
                       unchanged, seq=3)


def test_an_update_carries_only_the_changed_columns_in_old() -> None:
    info = table_info("postgresql")
    records = CanalFormat(clock=lambda: 2.0).encode_records(
        _update(dict(ROW), {**ROW, "v": "y", "n": "2.50"}), info)
    assert len(records) == 1 and records[0].key == b'{"id":"1","tag":"a"}'
    message = orjson.loads(records[0].value or b"")
    assert message["type"] == "UPDATE" and message["isDdl"] is False
    assert message["old"] == [{"v": "x", "n": "1.00"}]
    assert message["data"] == [{**ROW, "id": "1", "v": "y", "n": "2.50", "raw": "AP8="}]
    assert (message["database"], message["table"], message["pkNames"]) == (
        "public", "items", ["id", "tag"])
    assert message["es"] == 1714564800250 and message["ts"] == 2000
    assert message["id"] == message["seq"] == 3
    assert message["mysqlType"]["n"] == "numeric(12,2)" and message["sqlType"]["n"] == 2
    assert message["sqlType"]["ts"] == 93 and message["sqlType"]["raw"] == -2


def test_a_key_change_is_a_delete_and_an_insert() -> None:
    info = table_info("postgresql")
    records = CanalFormat().encode_records(_update(dict(ROW), {**ROW, "id": 2},
                                                   old_key=(1, "a")), info)
    messages = [orjson.loads(r.value or b"") for r in records]
    assert [m["type"] for m in messages] == ["DELETE", "INSERT"]
    assert messages[0]["data"][0]["id"] == "1" and messages[1]["data"][0]["id"] == "2"
    assert [r.key for r in records] == [b'{"id":"1","tag":"a"}', b'{"id":"2","tag":"a"}']


def test_missing_old_rows_stop_or_give_a_null_old_that_a_consumer_rejects() -> None:
    info = table_info("postgresql")
    with pytest.raises(FatalOutputError, match="REPLICA IDENTITY FULL"):
        CanalFormat().encode_records(_update(None, {**ROW, "v": "y"}), info)
    lax = CanalFormat(before_image="as-logged")
    record = lax.encode_records(_update(None, {**ROW, "v": "y"}), info)[0]
    assert orjson.loads(record.value or b"")["old"] is None
    consumer = CanalConsumer("postgresql")
    with pytest.raises(ConsumerError, match="without 'old'"):
        consumer.apply(record.key, record.value)
    after = {k: v for k, v in ROW.items() if k != "big"}
    with pytest.raises(FatalOutputError, match="unchanged TOAST"):
        lax.encode_records(_update(None, after, ("big",)), info)
    filled = CanalFormat().encode_records(_update(dict(ROW), after, ("big",)), info)[0]
    message = orjson.loads(filled.value or b"")
    assert message["data"][0]["big"] == "B" * 30 and message["old"] == [{}]


def test_truncate_is_a_ddl_message_and_markers_give_nothing() -> None:
    info = table_info("mysql")
    truncate = ChangeEvent(Op.TRUNCATE, info.table, position=MariadbGtid(((0, 1, 9),)),
                           txid=9, commit_ts="2024-05-01 12:00:00+00", seq=5)
    records = CanalFormat().encode_records(truncate, info)
    message = orjson.loads(records[0].value or b"")
    assert records[0].key is None and message["type"] == "TRUNCATE" and message["isDdl"]
    assert message["data"] is None and message["sql"] == "TRUNCATE TABLE shop.items"
    skipping = CanalFormat(truncate="skip")
    assert skipping.encode_records(truncate, info) == []
    assert skipping.encode_records(ChangeEvent(Op.BEGIN, None, txid=9), None) == []
    assert skipping.skipped == {"truncate": 1, "begin": 1}


def test_dump_rows_are_inserts_with_the_values_of_log_inserts() -> None:
    info = table_info("mysql")
    row = {"id": 1, "tag": "a", "v": "x", "n": "1.00", "ts": "2024-01-01 00:00:00.500000",
           "big": "b", "raw": "00"}
    position = MariadbGtid(((0, 1, 4),))
    read = ChangeEvent(Op.READ, info.table, (1, "a"), None, EncodedRow(orjson.dumps(row)),
                       position, dump_id="d", seq=1)
    insert = ChangeEvent(Op.INSERT, info.table, (1, "a"), None, dict(row), position, 4,
                         "2024-05-01 12:00:00+00", seq=2)
    fmt = format_by_name("canal-json")
    dumped, logged = (orjson.loads(fmt.encode_records(e, info)[0].value or b"")
                      for e in (read, insert))
    assert dumped["type"] == logged["type"] == "INSERT"
    assert dumped["data"] == logged["data"]
    assert dumped["data"][0]["ts"] == "2024-01-01 00:00:00.500000"  # datetime(6)


def test_requirements_match_the_changelog_rules() -> None:
    info = table_info("postgresql")
    findings = CanalFormat().requirements(info, LoggedImages.postgres(info.table, "d", False))
    assert [f.level for f in findings] == ["error"]
    assert "canal-json" in findings[0].message and findings[0].fix is not None
    assert "REPLICA IDENTITY FULL" in findings[0].fix
