"""Which columns an update's new tuple lacks because their TOAST value is unchanged, and which
because they did not exist when the update was logged (connectors/postgres/wal2json.py,
``_complete_toast``; catalog.ToastShape): a missing column is reported unchanged only when it
can hold a TOAST value and the old tuple is not a REPLICA IDENTITY FULL one; and the catalog is
not read again for every update of one column set."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from dblog.connectors.postgres.catalog import ToastShape
from dblog.connectors.postgres.wal2json import Wal2JsonDecoder
from dblog.core.model import ChangeEvent, TableId

T = TableId("public", "t")
PK = [{"name": "id", "type": "integer"}]


class Catalog:
    """Like PostgresConnector's column and TOAST-shape lookups: cached unless ``fresh``;
    counts the reads."""

    def __init__(self, columns: tuple[str, ...], shape: ToastShape) -> None:
        self.columns, self.shape, self.reads = columns, shape, 0

    def columns_of(self, table: TableId, fresh: bool) -> tuple[str, ...]:
        self.reads += fresh
        return self.columns

    def shape_of(self, table: TableId, fresh: bool) -> ToastShape:
        return self.shape


def _col(name: str, value: Any) -> dict[str, Any]:
    return {"name": name, "type": "integer" if isinstance(value, int) else "text",
            "value": value}


def _update(decoder: Wal2JsonDecoder, new: dict[str, Any], old: dict[str, Any] | None,
            lsn: int = 100) -> ChangeEvent:
    message: dict[str, Any] = {"action": "U", "xid": 1, "schema": "public", "table": "t",
                               "pk": PK, "columns": [_col(k, v) for k, v in new.items()]}
    if old is not None:
        message["identity"] = [_col(k, v) for k, v in old.items()]
    event = decoder.decode(orjson.dumps(message), lsn)
    assert isinstance(event, ChangeEvent)
    return event


def _decoder(catalog: Catalog) -> Wal2JsonDecoder:
    return Wal2JsonDecoder("test", TableId("dblog", "watermark"), catalog.columns_of,
                           toast_shape_of=catalog.shape_of)


COLUMNS = ("id", "tenant", "big", "n")  # n: an int column added after the rows were logged


@pytest.mark.parametrize(("full", "old", "unchanged", "after"), [
    # REPLICA IDENTITY FULL: big is in the old tuple; n is in neither: it did not exist
    (True, {"id": 1, "tenant": 1, "big": "B"}, (), {"id": 1, "tenant": 2, "big": "B"}),
    # USING INDEX (id, tenant): big is unchanged TOAST, n (int) cannot be: it did not exist
    (False, {"id": 1, "tenant": 1}, ("big",), {"id": 1, "tenant": 2}),
    # DEFAULT: no old tuple at all
    (False, None, ("big",), {"id": 1, "tenant": 2}),
])
def test_a_missing_column_is_unchanged_only_if_it_could_be_toasted(
        full: bool, old: dict[str, Any] | None, unchanged: tuple[str, ...],
        after: dict[str, Any]) -> None:
    catalog = Catalog(COLUMNS, ToastShape(full, frozenset({"big"})))
    event = _update(_decoder(catalog), {"id": 1, "tenant": 2}, old)
    assert event.unchanged == unchanged and event.after == after


def test_without_a_toast_shape_every_missing_column_is_reported_unchanged() -> None:
    catalog = Catalog(COLUMNS, ToastShape(True, frozenset()))
    decoder = Wal2JsonDecoder("test", TableId("dblog", "watermark"), catalog.columns_of)
    event = _update(decoder, {"id": 1, "tenant": 2}, {"id": 1, "tenant": 1})
    assert event.unchanged == ("big", "n")


def test_updates_of_one_column_set_read_the_catalog_once() -> None:
    catalog = Catalog(COLUMNS, ToastShape(False, frozenset({"big"})))
    decoder = _decoder(catalog)
    for lsn in range(100, 400):
        _update(decoder, {"id": lsn, "tenant": 2}, None, lsn)
    assert catalog.reads == 1
    _update(decoder, {"id": 1, "tenant": 2, "big": "B"}, None, 500)  # another set of columns
    assert catalog.reads == 2
