"""The apply job's table metadata without a ``tables`` entry: a column null in every record
of the first batch is not typed (null tells no type); where the job's Delta table exists, its
key and column types win over the batch's values (a restart infers from another batch); a
value its column cannot hold is one FatalOutputError naming the table, column and fix."""

from __future__ import annotations

from typing import Any, cast

import orjson
import pytest
from pyspark.sql.types import (
    BooleanType,
    DecimalType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from dblog.core.model import ColumnInfo, TableId, TableInfo
from dblog.errors import FatalOutputError
from dblog.outputs.spark_apply import infer_table, misfit_fix, stored_info
from dblog.outputs.spark_delta import Replica, arrow_batch
from dblog.outputs.spark_target import Snapshot, SparkDeltaTable
from dblog.outputs.sql_kinds import kinds_of
from dblog.replica import Guard, RowChange

T = TableId("public", "t")


def _doc(i: int, **after: Any) -> dict[str, Any]:
    return {"op": "insert", "schema": "public", "table": "t", "key": [i],
            "after": {"id": i, **after}}


def _types(info: TableInfo) -> dict[str, str]:
    return {c.name: c.type_name for c in info.columns}


def test_a_column_null_in_the_first_batch_is_not_typed_yet() -> None:
    info = infer_table(T, [_doc(1, qty=None, note="a"), _doc(2, qty=None, note=None)])
    assert info.key_columns == ("id",)
    assert _types(info) == {"id": "bigint", "note": "text"}  # not qty: "any" (JSON) before


def test_the_stored_table_types_the_columns_it_has() -> None:
    stored = TableInfo(T, (ColumnInfo("id", "bigint"), ColumnInfo("qty", "bigint"),
                           ColumnInfo("price", "double precision")), ("id",))
    info = infer_table(T, [_doc(1, qty=None, price=3, note="x")], stored)
    assert _types(info) == {"id": "bigint", "qty": "bigint", "price": "double precision",
                            "note": "text"}
    deletes = [{"op": "delete", "schema": "public", "table": "t", "key": [1]}]
    assert infer_table(T, deletes, stored).key_columns == ("id",)  # no records to tell it
    with pytest.raises(FatalOutputError, match="key columns"):
        infer_table(T, deletes)


def test_stored_info_reads_the_layout_types_and_the_key_property() -> None:
    schema = StructType([StructField("id", LongType()), StructField("v", DoubleType()),
                         StructField("ok", BooleanType()), StructField("n", StringType()),
                         StructField("d", DecimalType(12, 2)),
                         StructField("_dblog_major", LongType(), False),
                         StructField("_dblog_minor", LongType(), False),
                         StructField("_dblog_deleted", BooleanType(), False)])
    snap = Snapshot(3, None, orjson.dumps(["id"]).decode(), 0, schema.json())
    info = stored_info(T, snap)
    assert info is not None and info.key_columns == ("id",)
    assert _types(info) == {"id": "bigint", "v": "double precision", "ok": "boolean",
                            "n": "text", "d": "numeric(12,2)"}
    assert stored_info(T, Snapshot(-1, None, None, None, None)) is None


def test_a_value_its_column_cannot_hold_names_table_column_and_fix() -> None:
    info = TableInfo(T, (ColumnInfo("id", "bigint"), ColumnInfo("qty", "bigint")), ("id",))
    table = SparkDeltaTable(cast(Any, None), "delta.`/lake/public.t`", "/lake/public.t")
    replica = Replica(T, table, kinds_of(info), ("id",))
    changes = [(RowChange((i,), Guard(i, 0), row, seq=i), row)
               for i, row in ((1, {"id": 1, "qty": 5}), (2, {"id": 2, "qty": "five"}))]
    with pytest.raises(FatalOutputError) as raised:
        arrow_batch(replica, list(changes), misfit_fix)
    message = raised.value.message
    assert "delta.`/lake/public.t`: column qty holds int64" in message
    assert "seq 2 (key [2]) carries 'five'" in message
    assert raised.value.fix is not None and "tables.public.t.columns.qty" in raised.value.fix
