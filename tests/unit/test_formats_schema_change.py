"""Changelog formats across schema changes (dblog/formats/schema.py): a row with a column the
cached metadata lacks is mapped by its type after the metadata is read again; a column the
source no longer has is written as captured, with one warning; a format or lookup without
those abilities still stops; and a backlog logged before a column was added keeps its whole
old rows (``_full``)."""

from __future__ import annotations

import logging
from typing import Any

import msgspec
import orjson
import pytest

from dblog.connectors.postgres.positions import Lsn
from dblog.core.model import ChangeEvent, ColumnInfo, Op, TableId, TableInfo
from dblog.errors import FatalOutputError
from dblog.formats.base import format_by_name
from dblog.formats.debezium import DebeziumFormat
from dblog.formats.rows import UnknownColumns, UnmappableValue
from dblog.formats.schema import RefreshableLookup, encode_following_schema
from dblog.outputs.kafka_records import RecordPlanner
from dblog.testing.catalog import StaleCatalog

T = TableId("public", "grows")
OLD = TableInfo(T, (ColumnInfo("id", "integer"), ColumnInfo("v", "text")), ("id",))
NEW = TableInfo(T, (*OLD.columns, ColumnInfo("at", "timestamp with time zone")), ("id",))
AT = "2024-05-01 12:00:00+00"




def _event(op: Op, before: dict[str, Any] | None, after: dict[str, Any] | None) -> ChangeEvent:
    key = ((after or before or {})["id"],)
    return ChangeEvent(op, T, key, before, after, Lsn(0x10), 7, AT, seq=3)


def _lines(fmt: DebeziumFormat, events: list[ChangeEvent], tables: Any) -> list[Any]:
    return [orjson.loads(line) for line in fmt.encode_lines(events, tables).splitlines()]


def test_a_column_added_since_the_metadata_was_read_is_mapped_by_its_type() -> None:
    catalog = StaleCatalog(OLD, NEW)
    assert isinstance(catalog, RefreshableLookup)
    inserts = [_event(Op.INSERT, None, {"id": k, "v": "a", "at": AT}) for k in (1, 2)]
    out = _lines(DebeziumFormat(), inserts, catalog)
    assert [d["after"] for d in out] == [{"id": k, "v": "a", "at": "2024-05-01T12:00:00Z"}
                                         for k in (1, 2)]
    assert catalog.refreshes == 1


def test_a_column_the_source_no_longer_has_is_written_as_captured_once_warned(
        caplog: pytest.LogCaptureFixture) -> None:
    dropped = TableInfo(T, (OLD.columns[0], NEW.columns[2]), ("id",))  # 'v' dropped since
    catalog = StaleCatalog(dropped, dropped)
    fmt = DebeziumFormat()
    backlog = [_event(Op.UPDATE, {"id": 1, "v": "a", "at": AT}, {"id": 1, "v": "b", "at": AT}),
               _event(Op.DELETE, {"id": 2, "v": "c", "at": None}, None)]
    with caplog.at_level(logging.WARNING, "dblog.formats"):
        out = _lines(fmt, backlog, catalog)
    assert out[0]["before"] == {"id": 1, "v": "a", "at": "2024-05-01T12:00:00Z"}
    assert out[0]["after"] == {"id": 1, "v": "b", "at": "2024-05-01T12:00:00Z"}
    assert out[1]["before"] == {"id": 2, "v": "c", "at": None} and out[1]["op"] == "d"
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "['v']" in warned[0] and "public.grows" in warned[0]
    assert catalog.refreshes == 1  # tolerated from then on: no catalog read per event


def test_without_a_refreshable_lookup_an_unknown_column_is_passed_through() -> None:
    out = _lines(DebeziumFormat(), [_event(Op.INSERT, None, {"id": 1, "v": "a", "at": AT})],
                 lambda table: OLD)
    assert out[0]["after"] == {"id": 1, "v": "a", "at": AT}  # unmapped: its type is unknown


def test_a_format_that_cannot_tolerate_columns_still_stops() -> None:
    def encode(info: TableInfo | None) -> bytes:
        raise UnknownColumns("x", T, frozenset({"at"}))

    with pytest.raises(UnknownColumns, match="'at'"):
        encode_following_schema(object(), StaleCatalog(OLD, OLD), T, encode)


def test_kafka_records_follow_the_schema_too() -> None:
    catalog = StaleCatalog(OLD, NEW)
    planner = RecordPlanner(format_by_name("debezium-json", {}), "{schema}.{table}", {}, None,
                            True, lambda topic: 1, catalog)
    records = planner.plan(_event(Op.INSERT, None, {"id": 1, "v": "a", "at": AT}))
    assert [orjson.loads(r.value)["after"]["at"] for r in records if r.value] == [
        "2024-05-01T12:00:00Z"]


@pytest.mark.parametrize(("event", "whole"), [
    # logged before 'at' was added: every image lacks it
    (_event(Op.UPDATE, {"id": 1, "v": "a"}, {"id": 1, "v": "b"}), True),
    (_event(Op.DELETE, {"id": 1, "v": "a"}, None), True),
    # the source logged the key only (REPLICA IDENTITY DEFAULT): no whole old row
    (_event(Op.UPDATE, {"id": 1}, {"id": 2, "v": "b", "at": AT}), False),
    (_event(Op.DELETE, {"id": 1}, None), False),
])
def test_an_old_row_logged_before_a_column_was_added_is_whole(
        event: ChangeEvent, whole: bool) -> None:
    if event.op is Op.UPDATE and event.key != (1,):
        event = msgspec.structs.replace(event, key=(2,), old_key=(1,))
    if whole:
        out = _lines(DebeziumFormat(), [event], lambda table: NEW)
        assert out[0]["before"] == event.before
        return
    with pytest.raises(FatalOutputError, match="no full before image"):
        _lines(DebeziumFormat(), [event], lambda table: NEW)


@pytest.mark.parametrize("path", ["jsonl", "kafka"])
def test_an_event_encoded_again_on_fresh_metadata_counts_once_in_its_transaction(
        path: str) -> None:
    """A key change whose new row shows an added column is encoded a second time; its delete
    must not count twice in debezium-json's transaction order (found by a review)."""
    fmt = format_by_name("debezium-json", {"before_image": "as-logged"})
    catalog = StaleCatalog(OLD, NEW)
    begin = ChangeEvent(Op.BEGIN, None, txid=7, commit_ts=AT, position=Lsn(0x10))
    commit = ChangeEvent(Op.COMMIT, None, txid=7, commit_ts=AT, position=Lsn(0x20))
    update = ChangeEvent(Op.UPDATE, T, (2,), {"id": 1}, {"id": 2, "v": "b", "at": AT},
                         Lsn(0x10), 7, AT, old_key=(1,), seq=3)
    end = None
    if path == "jsonl":
        documents = [orjson.loads(x) for x in fmt.encode_lines([begin, update], catalog)
                     .splitlines()]
    else:
        planner = RecordPlanner(fmt, "{schema}.{table}", {}, None, True, lambda t: 1, catalog)
        planner.plan(begin)
        documents = [orjson.loads(r.value) for r in planner.plan(update) if r.value]
        value = fmt.encode_records(commit)[0].value
        assert value is not None
        end = orjson.loads(value)["event_count"]
    assert [d["op"] for d in documents] == ["d", "c"]
    assert [d["transaction"]["total_order"] for d in documents] == [1, 2]
    assert end == (2 if path == "kafka" else None)


def test_a_value_that_no_longer_fits_its_cached_type_is_mapped_by_the_fresh_one() -> None:
    """ALTER COLUMN at TYPE text while the pipeline runs: the cached metadata says
    timestamptz, the value is text; the format reads the metadata again once."""
    as_text = TableInfo(T, (*OLD.columns, ColumnInfo("at", "text")), ("id",))
    catalog = StaleCatalog(NEW, as_text)
    out = _lines(DebeziumFormat(), [_event(Op.INSERT, None, {"id": 1, "v": "a", "at": "soon"})],
                 catalog)
    assert out[0]["after"] == {"id": 1, "v": "a", "at": "soon"} and catalog.refreshes == 1
    with pytest.raises(UnmappableValue, match="type changed"):  # the fix says what to do
        _lines(DebeziumFormat(), [_event(Op.INSERT, None, {"id": 1, "v": "a", "at": "soon"})],
               lambda table: NEW)
    stale = StaleCatalog(NEW, NEW)  # a value logged under an older type: stops as before
    with pytest.raises(UnmappableValue):
        _lines(DebeziumFormat(), [_event(Op.INSERT, None, {"id": 1, "v": "a", "at": "soon"})],
               stale)
    assert stale.refreshes == 1
