"""An update of a table the catalog no longer has (dropped or renamed before the log was
decoded) is emitted as logged: the decoder never raises for it (connectors/postgres/wal2json.py,
``_complete_toast``; ``columns_of`` answers None for a relation that is gone)."""

from __future__ import annotations

from typing import Any

import orjson

from dblog.connectors.postgres.catalog import ToastShape
from dblog.connectors.postgres.wal2json import Wal2JsonDecoder
from dblog.core.model import ChangeEvent, TableId

WATERMARK = TableId("dblog", "watermark")


def _update(decoder: Wal2JsonDecoder, new: dict[str, Any], old: dict[str, Any] | None = None
            ) -> ChangeEvent:
    def col(name: str, value: Any) -> dict[str, Any]:
        return {"name": name, "type": "integer" if isinstance(value, int) else "text",
                "value": value}
    message: dict[str, Any] = {"action": "U", "xid": 1, "schema": "public", "table": "gone",
                               "pk": [{"name": "id", "type": "integer"}],
                               "columns": [col(k, v) for k, v in new.items()]}
    if old is not None:
        message["identity"] = [col(k, v) for k, v in old.items()]
    event = decoder.decode(orjson.dumps(message), 100)
    assert isinstance(event, ChangeEvent)
    return event


def test_a_table_the_catalog_does_not_know_is_emitted_as_logged() -> None:
    asked: list[bool] = []

    def columns_of(table: TableId, fresh: bool) -> tuple[str, ...] | None:
        asked.append(fresh)
        return None

    def shape_of(table: TableId, fresh: bool) -> ToastShape | None:
        raise AssertionError("no TOAST shape is asked for a table without columns")

    decoder = Wal2JsonDecoder("test", WATERMARK, columns_of, toast_shape_of=shape_of)
    event = _update(decoder, {"id": 1, "v": "b"})
    assert event.table == TableId("public", "gone")
    assert event.key == (1,) and event.after == {"id": 1, "v": "b"} and event.unchanged == ()
    partial = _update(decoder, {"id": 2}, {"id": 2})  # no catalog: nothing to call unchanged
    assert partial.after == {"id": 2} and partial.unchanged == ()
    for _ in range(5):
        _update(decoder, {"id": 3, "v": "c"})
    assert asked.count(True) <= 3, "the catalog was read again for every update"


def test_last_known_columns_still_mark_a_missing_value_unchanged() -> None:
    """The connector answers the columns it knew before the table went; with no TOAST shape
    every column the new tuple and the old identity lack is reported unchanged."""
    decoder = Wal2JsonDecoder("test", WATERMARK, lambda table, fresh: ("id", "v", "big"),
                              toast_shape_of=lambda table, fresh: None)
    event = _update(decoder, {"id": 1, "v": "b"}, {"id": 1})
    assert event.after == {"id": 1, "v": "b"} and event.unchanged == ("big",)
