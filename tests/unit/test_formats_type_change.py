"""A column whose type changed (PostgreSQL ``ALTER COLUMN ... TYPE``, which logs no schema
event): wal2json logs each column's type with its value, the decoder hands the types on with
the event (``ChangeEvent.types``, one mapping per table until a type changes), and the
changelog formats map each value by the type it was logged under: with the table's metadata
read again once per change where the catalog now agrees (a retype while the pipeline runs),
by the logged type where it does not (a backlog logged before the change)."""

from __future__ import annotations

from typing import Any

import msgspec
import orjson

from dblog.connectors.postgres.positions import Lsn
from dblog.connectors.postgres.wal2json import Wal2JsonDecoder
from dblog.core.model import ChangeEvent, ColumnInfo, Op, TableId, TableInfo
from dblog.formats.canal import CanalFormat
from dblog.formats.changelog import ChangelogFormat
from dblog.formats.debezium import DebeziumFormat
from dblog.outputs.kafka_records import RecordPlanner
from dblog.testing.catalog import StaleCatalog

T = TableId("public", "retyped")
TZ = "timestamp with time zone"
OLD = TableInfo(T, (ColumnInfo("id", "integer"), ColumnInfo("at", "text"),
                    ColumnInfo("n", "integer")), ("id",))
NEW = TableInfo(T, (ColumnInfo("id", "integer"), ColumnInfo("at", TZ),
                    ColumnInfo("n", "numeric")), ("id",))
AT = "2024-05-01 12:00:00+00"




def _message(action: str, row: dict[str, tuple[str, Any]]) -> bytes:
    columns = [{"name": k, "type": t, "value": v} for k, (t, v) in row.items()]
    return orjson.dumps({"action": action, "xid": 7, "schema": "public", "table": "retyped",
                         "pk": [{"name": "id", "type": "integer"}],
                         "identity" if action == "D" else "columns": columns})


def _decoded(messages: list[bytes]) -> list[ChangeEvent]:
    decoder = Wal2JsonDecoder("test", TableId("dblog", "watermark"), lambda t, fresh: None)
    events = [decoder.decode(m, 0x10 + i) for i, m in enumerate(messages)]
    out = []
    for i, event in enumerate(events):
        assert isinstance(event, ChangeEvent)
        out.append(msgspec.structs.replace(event, commit_ts=AT, seq=i + 1))
    return out


def _old(k: int) -> bytes:  # logged before the ALTER: at text, n integer
    return _message("I", {"id": ("integer", k), "at": ("text", AT), "n": ("integer", k)})


def _new(k: int) -> bytes:  # logged after it: at timestamptz, n numeric (the value fits int)
    return _message("I", {"id": ("integer", k), "at": (TZ, AT), "n": ("numeric", k)})


def test_the_decoder_hands_on_the_logged_types_one_mapping_until_a_type_changes() -> None:
    events = _decoded([_old(1), _old(2), _new(3), _new(4),
                       _message("D", {"id": ("integer", 4)})])
    first, second, third, fourth, delete = (e.types for e in events)
    assert first == {"id": "integer", "at": "text", "n": "integer"}
    assert third == {"id": "integer", "at": TZ, "n": "numeric"}
    assert first is second and third is fourth and delete is third  # no copy per event


def _lines(fmt: ChangelogFormat, events: list[ChangeEvent], catalog: Any) -> list[Any]:
    return [orjson.loads(x) for x in fmt.encode_lines(events, catalog).splitlines()]


def test_values_of_a_type_changed_while_running_are_mapped_by_the_new_type() -> None:
    """The catalog was read before the ALTER: values of the new types fit the old ones
    (a timestamp is text, 3 an integer) and were mapped by the old types until a restart."""
    events = _decoded([_old(1), _new(2), _new(3)])
    catalog = StaleCatalog(OLD, NEW)
    debezium = _lines(DebeziumFormat(), events, catalog)
    assert [d["after"] for d in debezium] == [
        {"id": 1, "at": AT, "n": 1},
        {"id": 2, "at": "2024-05-01T12:00:00Z", "n": "2"},
        {"id": 3, "at": "2024-05-01T12:00:00Z", "n": "3"}]
    assert catalog.refreshes == 1  # once per change, not per event
    canal = _lines(CanalFormat(), events, StaleCatalog(OLD, NEW))
    assert [c["data"][0]["at"] for c in canal] == [AT, "2024-05-01 12:00:00",
                                                   "2024-05-01 12:00:00"]
    assert canal[0]["mysqlType"] == {"id": "integer", "at": "text", "n": "integer"}
    assert canal[1]["mysqlType"] == {"id": "integer", "at": TZ, "n": "numeric"}
    assert canal[1]["sqlType"] == {"id": 4, "at": 2014, "n": 2}


def test_the_refreshed_catalog_maps_dump_rows_of_the_new_type() -> None:
    catalog = StaleCatalog(OLD, NEW)
    fmt = DebeziumFormat()
    read = ChangeEvent(Op.READ, T, (9,), after={"id": 9, "at": AT, "n": "9"},
                       position=Lsn(0x90), dump_id="d", seq=9)
    out = _lines(fmt, [*_decoded([_new(2)]), read], catalog)
    assert out[1]["after"] == {"id": 9, "at": "2024-05-01T12:00:00Z", "n": "9"}


def test_a_backlog_logged_under_the_old_types_is_mapped_by_them() -> None:
    """After a restart the catalog holds today's types; events logged before the ALTER
    carry the old ones (wal2json decodes with the catalog of their time)."""
    events = _decoded([_message("I", {"id": ("integer", 1), "at": ("text", "soon"),
                                      "n": ("integer", 1)}), _old(2), _new(3)])
    catalog = StaleCatalog(NEW, NEW)
    out = _lines(DebeziumFormat(), events, catalog)
    assert [d["after"] for d in out] == [
        {"id": 1, "at": "soon", "n": 1}, {"id": 2, "at": AT, "n": 2},
        {"id": 3, "at": "2024-05-01T12:00:00Z", "n": "3"}]
    assert catalog.refreshes <= 1


def test_kafka_records_follow_the_logged_types_too() -> None:
    catalog = StaleCatalog(OLD, NEW)
    planner = RecordPlanner(DebeziumFormat(), "{schema}.{table}", {}, None, True,
                            lambda topic: 1, catalog)
    records = [r for e in _decoded([_old(1), _new(2), _new(3)]) for r in planner.plan(e)]
    assert [orjson.loads(r.value)["after"]["at"] for r in records if r.value] == [
        AT, "2024-05-01T12:00:00Z", "2024-05-01T12:00:00Z"]
    assert catalog.refreshes == 1
