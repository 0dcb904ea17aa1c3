"""The sink checkpoint of the Spark output's Delta sink: the ``delta`` output's
``_dblog_checkpoint`` table (:mod:`dblog.outputs.delta_checkpoint`: same schema, one row per
pipeline), written through delta-spark with a MERGE on ``pipeline`` after the data of each
flush (and before a truncate's DELETE: :meth:`SparkCheckpointTable.store_barrier`), under the
same epoch fence (:mod:`dblog.outputs.spark_target`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema

from dblog.core.model import TableId
from dblog.replica import Guard
from dblog.spi import Checkpoint

from .delta_checkpoint import SCHEMA
from .spark_session import arrow_frame
from .spark_target import Fence, SparkDeltaTable
from .sql_checkpoint import StoredCheckpoint, decode_barriers, encode_barriers

if TYPE_CHECKING:
    from pyspark.sql import Row, SparkSession

NAME = "_dblog_checkpoint"


def create_statement(ident: str, schema: pa.Schema, properties: dict[str, str],
                     partition_by: list[str] | None = None) -> str:
    """``CREATE TABLE IF NOT EXISTS`` for a Delta table of the Arrow ``schema``."""
    struct = from_arrow_schema(schema)
    columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}"
                        f"{'' if f.nullable else ' NOT NULL'}" for f in struct.fields)
    props = ", ".join(f"'{k}' = '{v.replace(chr(39), chr(92) + chr(39))}'"
                      for k, v in properties.items())
    parts = f" PARTITIONED BY ({', '.join(f'`{c}`' for c in partition_by)})" \
        if partition_by else ""
    tail = f" TBLPROPERTIES ({props})" if props else ""
    return f"CREATE TABLE IF NOT EXISTS {ident} ({columns}) USING delta{parts}{tail}"


class SparkCheckpointTable:
    def __init__(self, spark: SparkSession, table: SparkDeltaTable, fence: Fence) -> None:
        self.spark, self.table, self.fence = spark, table, fence
        self.row: dict[str, Any] = {"seq": 0, "position": None, "state": None}
        self.stored: tuple[str | None, dict[TableId, Guard]] = (None, {})
        """The scheme and barriers in the stored row."""

    def open(self, reopen: Any) -> StoredCheckpoint:
        """Create the table when missing, claim it, read the pipeline's row. ``reopen``
        resolves the table again once created (a catalog table's location)."""
        self.spark.sql(create_statement(self.table.ident, SCHEMA, {}))
        if not self.table.location:
            self.table = reopen()
        self.fence.claim(self.table, self._empty)
        quoted = self.fence.pipeline.replace("'", "''")
        rows = self.spark.sql(f"SELECT * FROM {self.table.ident} "
                              f"WHERE pipeline = '{quoted}'").collect()
        if not rows:
            return StoredCheckpoint(self.fence.epoch, 0, None, None)
        row = rows[-1]
        self.row = {k: row[k] for k in ("seq", "position", "state")}
        state = orjson.loads(row["state"]) if row["state"] else None
        self.stored = (row["scheme"], decode_barriers(row["barriers"] or "[]"))
        return StoredCheckpoint(int(row["epoch"]), int(row["seq"]), state, *self.stored)

    def _empty(self) -> None:
        arrow_frame(self.spark, SCHEMA.empty_table()).write.format("delta").mode("append") \
            .save(self.table.location)

    def write(self, covered: Checkpoint | None, scheme: str | None,
              barriers: dict[TableId, Guard], seq: int) -> None:
        """Replace the pipeline's row (fenced): the state when ``covered``, else the one
        stored."""
        row = self.row
        if covered is not None:
            position = covered.state.get("position")
            row = {"seq": covered.seq, "state": orjson.dumps(covered.state).decode(),
                   "position": position if isinstance(position, str) else None}
        data = pa.Table.from_pylist([{"pipeline": self.fence.pipeline,
                                      "epoch": self.fence.epoch, **row, "scheme": scheme,
                                      "barriers": encode_barriers(barriers)}], schema=SCHEMA)
        view = f"dblog_ckpt_{id(self)}"
        arrow_frame(self.spark, data).createOrReplaceTempView(view)

        def merge() -> list[Row]:
            return self.spark.sql(
                f"MERGE INTO {self.table.ident} t USING {view} s ON t.pipeline = s.pipeline "
                "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *").collect()

        try:
            self.fence.commit(self.table, seq, merge)
        finally:
            self.spark.catalog.dropTempView(view)
        self.row, self.stored = row, (scheme, dict(barriers))  # only once stored

    def store_barrier(self, table: TableId, barrier: Guard, seq: int) -> None:
        """Store ``barrier`` for ``table`` in the row (its state, seq and scheme as stored)
        before the truncate's DELETE: the DELETE leaves no tombstones, and a crash before
        the flush's last row would lose the barrier that refuses older replayed changes."""
        scheme, barriers = self.stored
        if table not in barriers or barriers[table] < barrier:
            self.write(None, scheme, {**barriers, table: barrier}, seq)
