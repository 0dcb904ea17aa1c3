"""debezium-json: a consumer written from Debezium's published event definitions rebuilds the
source table from generated streams; the before-image, TOAST, truncate and marker rules; the
type mapping (equal for log and dump events); the source and transaction blocks."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dblog.connectors.mysql.positions import BinlogPosition, MariadbGtid, MysqlGtidSet
from dblog.connectors.postgres.positions import Lsn
from dblog.core.model import ChangeEvent, EncodedRow, Op, TableId
from dblog.core.positions import Position
from dblog.errors import ConfigError, FatalOutputError
from dblog.formats.base import Record, format_by_name
from dblog.formats.debezium import DebeziumFormat
from dblog.formats.rows import UnknownColumns
from dblog.spi.source import LoggedImages
from tests.changelog_consumers import ConsumerError, Ddl, DebeziumConsumer, apply_lines
from tests.changelog_streams import TYPES, actions, expected_rows, run, table_info


def _ddl(family: str) -> Ddl:
    info = table_info(family)
    return Ddl(family, {(info.table.schema, info.table.name): (TYPES[family], info.key_columns)})


def _records(fmt: DebeziumFormat, events: list[ChangeEvent], family: str,
             transactions: list[Record] | None = None) -> list[Record]:
    """The records of the table's topic; transaction records go to ``transactions``."""
    info = table_info(family)
    out: list[Record] = []
    for event in events:
        records = fmt.encode_records(event, info if event.table else None)
        (out if event.table else transactions if transactions is not None else []).extend(
            records)
    return out


@pytest.mark.parametrize("family", ["postgresql", "mysql"])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_debezium_consumer_rebuilds_the_table_from_records_and_lines(
        family: str, data: st.DataObject) -> None:
    model = run(family, data.draw(actions(family)))
    transactions: list[Record] = []
    records = _records(DebeziumFormat(), model.events, family, transactions)
    _check_transactions(records, transactions)
    consumer = DebeziumConsumer(_ddl(family))
    for record in records:
        consumer.apply(record.key, record.value)
    assert consumer.rows == expected_rows(model)
    info = table_info(family)
    lines = DebeziumFormat().encode_lines(model.events, lambda t: info)
    from_lines = DebeziumConsumer(_ddl(family))
    apply_lines(from_lines, lines.splitlines())
    assert from_lines.rows == expected_rows(model)
    # every delete is followed by its tombstone; a key change is d, tombstone, c
    for index, record in enumerate(records):
        if record.value is not None and orjson.loads(record.value)["op"] == "d":
            assert records[index + 1] == Record(record.key, None)


def _check_transactions(records: list[Record], transactions: list[Record]) -> None:
    """Each transaction has a BEGIN and an END record keyed by its id, and END counts the
    transaction's change records, as Debezium's transaction metadata does."""
    counts: dict[str, int] = {}
    for record in records:
        if record.value is not None:
            block = orjson.loads(record.value)["transaction"]
            if block is not None:
                counts[block["id"]] = counts.get(block["id"], 0) + 1
                assert block["total_order"] == counts[block["id"]]
    ends: dict[str, int] = {}
    statuses = [orjson.loads(r.value or b"")["status"] for r in transactions]
    assert statuses == ["BEGIN", "END"] * (len(transactions) // 2)
    for record in transactions:
        value = orjson.loads(record.value or b"")
        assert orjson.loads(record.key or b"") == {"id": value["id"]}
        if value["status"] == "END":
            ends[value["id"]] = value["event_count"]
            assert sum(c["event_count"] for c in value["data_collections"]) == \
                value["event_count"]
    assert {k: v for k, v in ends.items() if v} == counts


def _pg_update(before: dict[str, Any] | None, after: dict[str, Any],
               unchanged: tuple[str, ...] = (), old_key: tuple[Any, ...] | None = None
               ) -> ChangeEvent:
    return ChangeEvent(Op.UPDATE, TableId("public", "items"), (after["id"], after["tag"]),
                       before, after, Lsn(0x10), 7, "2024-05-01 12:00:00+00", old_key,
                       unchanged, seq=3)


ROW = {"id": 1, "tag": "a", "v": "x", "n": "1.00", "ts": None, "big": "B" * 30, "raw": None}


def test_an_update_without_before_image_stops_with_the_replica_identity_fix() -> None:
    info = table_info("postgresql")
    with pytest.raises(FatalOutputError) as caught:
        DebeziumFormat().encode_records(_pg_update(None, {**ROW, "v": "y"}), info)
    assert "public.items" in caught.value.message and "no full before image" in \
        caught.value.message
    assert caught.value.fix is not None
    assert "ALTER TABLE public.items REPLICA IDENTITY FULL" in caught.value.fix
    delete = ChangeEvent(Op.DELETE, info.table, (1, "a"), {"id": 1, "tag": "a"}, None,
                         Lsn(0x20), 8, "2024-05-01 12:00:00+00", seq=4)
    with pytest.raises(FatalOutputError, match=r"only \['id', 'tag'\]"):
        DebeziumFormat().encode_records(delete, info)


def test_as_logged_emits_what_the_source_logged_and_a_strict_consumer_refuses_it() -> None:
    info = table_info("postgresql")
    fmt = DebeziumFormat(before_image="as-logged")
    update = fmt.encode_records(_pg_update(None, {**ROW, "v": "y"}), info)
    document = orjson.loads(update[0].value or b"")
    assert document["op"] == "u" and document["before"] is None
    assert document["after"]["v"] == "y"
    delete = ChangeEvent(Op.DELETE, info.table, (1, "a"), None, None, Lsn(0x20), 8,
                         "2024-05-01 12:00:00+00", seq=4)
    records = fmt.encode_records(delete, info)
    assert orjson.loads(records[0].value or b"")["before"] == {"id": 1, "tag": "a"}
    consumer = DebeziumConsumer(_ddl("postgresql"))
    consumer.rows[(("public", "items"), (1, "a"))] = dict(ROW)
    with pytest.raises(ConsumerError, match="null 'before'"):
        consumer.apply(update[0].key, update[0].value)


def test_unchanged_toast_columns_are_filled_from_the_old_row_or_refused() -> None:
    info = table_info("postgresql")
    after = {k: v for k, v in ROW.items() if k != "big"} | {"v": "new"}
    full = DebeziumFormat().encode_records(_pg_update(dict(ROW), after, ("big",)), info)
    assert orjson.loads(full[0].value or b"")["after"]["big"] == "B" * 30
    lossy = DebeziumFormat(before_image="as-logged")
    with pytest.raises(FatalOutputError, match=r"unchanged TOAST column\(s\) \['big'\]"):
        lossy.encode_records(_pg_update(None, after, ("big",)), info)
    omitting = DebeziumFormat(before_image="as-logged", unchanged_columns="omit")
    omitted = orjson.loads(omitting.encode_records(_pg_update(None, after, ("big",)),
                                                   info)[0].value or b"")
    assert "big" not in omitted["after"] and omitted["after"]["v"] == "new"


def test_a_key_change_is_a_delete_a_tombstone_and_a_create() -> None:
    info = table_info("postgresql")
    event = _pg_update(dict(ROW), {**ROW, "id": 2}, old_key=(1, "a"))
    records = DebeziumFormat().encode_records(event, info)
    assert [r.key for r in records] == [b'{"id":1,"tag":"a"}'] * 2 + [b'{"id":2,"tag":"a"}']
    assert records[1].value is None
    first, last = (orjson.loads(r.value or b"") for r in (records[0], records[2]))
    assert (first["op"], first["after"], first["before"]["id"]) == ("d", None, 1)
    assert (last["op"], last["before"], last["after"]["id"]) == ("c", None, 2)
    no_tombstones = DebeziumFormat(tombstones=False).encode_records(event, info)
    assert [r.value is None for r in no_tombstones] == [False, False]


def test_truncate_is_emitted_skipped_or_refused_and_markers_are_counted() -> None:
    info = table_info("postgresql")
    truncate = ChangeEvent(Op.TRUNCATE, info.table, position=Lsn(0x30), txid=9,
                           commit_ts="2024-05-01 12:00:00+00", seq=5)
    emitted = DebeziumFormat().encode_records(truncate, info)
    assert len(emitted) == 1 and emitted[0].key is None
    document = orjson.loads(emitted[0].value or b"")
    assert (document["op"], document["before"], document["after"]) == ("t", None, None)
    skipping = DebeziumFormat(truncate="skip", transaction_metadata=False)
    assert skipping.encode_records(truncate, info) == []
    for op in (Op.BEGIN, Op.COMMIT):
        assert skipping.encode_records(ChangeEvent(op, None, txid=9, position=Lsn(1)), None) == []
    assert skipping.encode_records(ChangeEvent(Op.SCHEMA, info.table, position=Lsn(2)),
                                   info) == []
    assert skipping.skipped == {"truncate": 1, "begin": 1, "commit": 1, "schema": 1}
    with pytest.raises(FatalOutputError, match=r"TRUNCATE of public\.items"):
        DebeziumFormat(truncate="fail").encode_records(truncate, info)


def test_row_events_need_the_table_metadata_and_known_columns() -> None:
    info = table_info("postgresql")
    insert = ChangeEvent(Op.INSERT, info.table, (1, "a"), None, dict(ROW), Lsn(1), 1,
                         "2024-05-01 12:00:00+00", seq=1)
    with pytest.raises(FatalOutputError, match=r"no metadata .* for table public\.items"):
        DebeziumFormat().encode_records(insert, None)
    extra = ChangeEvent(Op.INSERT, info.table, (1, "a"), None, {**ROW, "added": 1}, Lsn(1), 1,
                        "2024-05-01 12:00:00+00", seq=1)
    with pytest.raises(UnknownColumns, match=r"column\(s\) \['added'\] of public\.items"):
        DebeziumFormat().encode_records(extra, info)


def test_options_are_checked_with_the_field_named() -> None:
    with pytest.raises(ConfigError, match="before_image") as caught:
        format_by_name("debezium-json", {"before_image": "sometimes"})
    assert caught.value.fix is not None and "truncate" in caught.value.fix
    with pytest.raises(ConfigError, match="colour"):
        format_by_name("canal-json", {"colour": "red"})
    assert isinstance(format_by_name("debezium-json", {"server_name": "x"}), DebeziumFormat)


def test_the_source_block_carries_each_sources_position() -> None:
    pg = table_info("postgresql")
    fmt = DebeziumFormat(database="shop", server_name="srv", clock=lambda: 1.5)
    insert = ChangeEvent(Op.INSERT, pg.table, (1, "a"), None, dict(ROW),
                         Lsn((0x16 << 32) | 0xB3), 731, "2024-05-01 12:00:00.428784+00", seq=1)
    source = orjson.loads(fmt.encode_records(insert, pg)[0].value or b"")["source"]
    assert source["connector"] == "postgresql" and source["name"] == "srv"
    assert (source["db"], source["schema"], source["table"]) == ("shop", "public", "items")
    assert source["lsn"] == (0x16 << 32) | 0xB3 and source["txId"] == 731
    assert source["ts_ms"] == 1714564800428 and source["snapshot"] == "false"
    assert source["dblog_position"] == "16/B3"
    read = ChangeEvent(Op.READ, pg.table, (1, "a"), None, dict(ROW), Lsn(5), dump_id="d", seq=2)
    document = orjson.loads(fmt.encode_records(read, pg)[0].value or b"")
    assert document["source"]["snapshot"] == "incremental" and document["op"] == "r"
    assert document["transaction"] is None and document["ts_ms"] == 1500
    my = table_info("mysql")
    located = MariadbGtid(((0, 1, 4), (1, 2, 625)), log_location=("mariadb-bin.000002", 1234))
    cases: list[tuple[Position, str, str | None, str | None]] = [
            (MariadbGtid(((0, 1, 4), (1, 2, 625))), "mariadb", "1-2-625", None),
            (located, "mariadb", "1-2-625", "mariadb-bin.000002"),
            (MysqlGtidSet.parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-625"), "mysql",
             "3e11fa47-71ca-11e1-9e33-c80aa9429562:625", None),
            (BinlogPosition("mysql-bin.000003", 1234), "mysql", None, "mysql-bin.000003")]
    for position, connector, gtid, file in cases:
        event = ChangeEvent(Op.INSERT, my.table, (1, "a"), None, dict(ROW), position, 625,
                            "2024-05-01 12:00:00+00", seq=3)
        source = orjson.loads(DebeziumFormat().encode_records(event, my)[0].value
                              or b"")["source"]
        assert (source["connector"], source["gtid"], source["file"]) == (connector, gtid, file)
        assert source["db"] == "shop" and source["table"] == "items"
        assert source["pos"] == (1234 if file else None)
        assert source["server_id"] == (2 if connector == "mariadb" else None)


def test_the_transaction_block_counts_events_per_transaction_and_table() -> None:
    one, two = table_info("postgresql", "one"), table_info("postgresql", "two")
    fmt = DebeziumFormat()

    def insert(info: Any, key: int, txid: int) -> ChangeEvent:
        return ChangeEvent(Op.INSERT, info.table, (key, "a"), None, {**ROW, "id": key},
                           Lsn(key), txid, "2024-05-01 12:00:00+00", seq=key)

    blocks, markers = [], []
    for txid, events in [(7, [insert(one, 1, 7), insert(two, 2, 7), insert(one, 3, 7)]),
                         (8, [insert(two, 4, 8)])]:
        markers += fmt.encode_records(ChangeEvent(Op.BEGIN, None, txid=txid, position=Lsn(0),
                                                  commit_ts="2024-05-01 12:00:00+00"), None)
        for event in events:
            info = one if event.table == one.table else two
            blocks.append(orjson.loads(fmt.encode_records(event, info)[0].value
                                       or b"")["transaction"])
        markers += fmt.encode_records(ChangeEvent(Op.COMMIT, None, txid=txid, position=Lsn(9),
                                                  commit_ts="2024-05-01 12:00:00+00"), None)
    assert [(b["id"], b["total_order"], b["data_collection_order"]) for b in blocks] == [
        ("7", 1, 1), ("7", 2, 1), ("7", 3, 2), ("8", 1, 1)]
    assert [r.key for r in markers] == [b'{"id":"7"}'] * 2 + [b'{"id":"8"}'] * 2
    assert [orjson.loads(r.value or b"") for r in markers[:2]] == [
        {"status": "BEGIN", "id": "7", "event_count": None, "data_collections": None,
         "ts_ms": 1714564800000},
        {"status": "END", "id": "7", "event_count": 3, "data_collections": [
            {"data_collection": "public.one", "event_count": 2},
            {"data_collection": "public.two", "event_count": 1}], "ts_ms": 1714564800000}]
    lines = fmt.encode_lines([ChangeEvent(Op.BEGIN, None, txid=9, position=Lsn(0))])
    assert lines == b""  # a file of changes has no transaction records
    quiet = DebeziumFormat(transaction_metadata=False)
    assert orjson.loads(quiet.encode_records(insert(one, 1, 7), one)[0].value
                        or b"")["transaction"] is None


def test_requirements_tell_check_what_the_source_must_log() -> None:
    info = table_info("postgresql")
    default = LoggedImages.postgres(info.table, "d", toastable=True)
    findings = DebeziumFormat().requirements(info, default)
    assert [f.level for f in findings] == ["error", "error"]
    assert all(f.fix == "ALTER TABLE public.items REPLICA IDENTITY FULL;" or
               (f.fix or "").startswith("ALTER TABLE public.items REPLICA IDENTITY FULL;")
               for f in findings)
    assert "public.items" in findings[0].message
    relaxed = DebeziumFormat(before_image="as-logged", unchanged_columns="omit")
    assert [f.level for f in relaxed.requirements(info, default)] == ["warning", "warning"]
    assert [f.level for f in DebeziumFormat().requirements(
        info, LoggedImages.postgres(info.table, "f", toastable=True))] == ["ok"]
    assert [f.level for f in DebeziumFormat().requirements(
        table_info("mysql"), LoggedImages.binlog())] == ["ok"]


def test_encode_joins_the_records_of_one_event() -> None:
    info = table_info("postgresql")
    event = _pg_update(dict(ROW), {**ROW, "id": 2}, old_key=(1, "a"))
    encoded = DebeziumFormat().encode(event, info)
    assert [orjson.loads(line)["op"] for line in encoded.split(b"\n")] == ["d", "c"]
    read = ChangeEvent(Op.READ, info.table, (1, "a"), None, EncodedRow(orjson.dumps(ROW)),
                       Lsn(5), dump_id="d", seq=2)
    assert orjson.loads(DebeziumFormat().encode(read, info))["after"]["v"] == "x"


def test_every_builtin_format_is_a_format_by_name() -> None:
    """The registry gives each built-in format (typed as the Format protocol, so mypy checks
    that each implements it)."""
    from dblog.formats.base import Format
    from dblog.formats.canal import CanalFormat
    from dblog.formats.native import NativeFormat

    formats: list[Format] = [NativeFormat(), DebeziumFormat(), CanalFormat()]
    for fmt in formats:
        made = format_by_name(fmt.name)
        assert type(made) is type(fmt) and made is not fmt
