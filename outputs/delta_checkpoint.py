"""The sink checkpoint of the Delta output: one row per pipeline in the ``_dblog_checkpoint``
Delta table beside the replica tables, written last in each flush (and, in a flush with a
new truncate barrier, first too: see :mod:`dblog.outputs.delta`) under the same epoch fence
as the data commits (:mod:`dblog.outputs.delta_table`). It holds the leader epoch, the
pipeline state the engine adopts, and the guard scheme and truncate barriers the apply core
needs after a restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from dblog.core.model import TableId
from dblog.replica import Guard
from dblog.spi import Checkpoint

from . import delta_table as dtab
from .sql_checkpoint import StoredCheckpoint, decode_barriers, encode_barriers

SCHEMA = pa.schema([pa.field("pipeline", pa.string(), nullable=False),
                    pa.field("epoch", pa.int64(), nullable=False),
                    pa.field("seq", pa.int64(), nullable=False),
                    pa.field("position", pa.string()), pa.field("state", pa.string()),
                    pa.field("scheme", pa.string()), pa.field("barriers", pa.string())])


class CheckpointTable:
    def __init__(self, path: Path, pipeline: str, epoch: int) -> None:
        self.path, self.pipeline, self.epoch = path, pipeline, epoch
        self.table: DeltaTable | None = None
        self.row: dict[str, Any] = {"seq": 0, "position": None, "state": None}

    def open(self) -> StoredCheckpoint:
        """Create the table when missing, claim it for this epoch, read the pipeline's row."""
        if DeltaTable.is_deltatable(str(self.path)):
            table = DeltaTable(str(self.path))
        else:
            table = DeltaTable.create(str(self.path), SCHEMA, mode="ignore")
        dtab.claim(table, self.pipeline, self.epoch)
        self.table = table
        literal = pa.scalar(self.pipeline)
        rows = table.to_pyarrow_dataset().to_table(
            filter=pc.field("pipeline") == literal).to_pylist()
        if not rows:
            return StoredCheckpoint(self.epoch, 0, None, None)
        row = rows[-1]
        self.row = {k: row[k] for k in ("seq", "position", "state")}
        state = orjson.loads(row["state"]) if row["state"] else None
        return StoredCheckpoint(int(row["epoch"]), int(row["seq"]), state, row["scheme"],
                                decode_barriers(row["barriers"] or "[]"))

    def check(self) -> None:
        """Refuse before any data commit when a newer epoch wrote the checkpoint."""
        assert self.table is not None
        dtab.check_epoch(self.table, self.pipeline, self.epoch)

    def write(self, covered: Checkpoint | None, scheme: str | None,
              barriers: dict[TableId, Guard], seq: int) -> None:
        """Replace the pipeline's row (fenced): the state when ``covered``, else the one
        stored (a flush with a new truncate barrier writes it so before its deletes)."""
        table = self.table
        assert table is not None
        dtab.check_epoch(table, self.pipeline, self.epoch)
        row = self.row
        if covered is not None:
            position = covered.state.get("position")
            row = {"seq": covered.seq, "state": orjson.dumps(covered.state).decode(),
                   "position": position if isinstance(position, str) else None}
        data = pa.Table.from_pylist([{"pipeline": self.pipeline, "epoch": self.epoch,
                                      **row, "scheme": scheme,
                                      "barriers": encode_barriers(barriers)}], schema=SCHEMA)
        quoted = self.pipeline.replace("'", "''")
        write_deltalake(table, data, mode="overwrite", predicate=f"pipeline = '{quoted}'",
                        commit_properties=dtab.commit_properties(self.pipeline, self.epoch,
                                                                 seq))
        self.row = row  # only once stored: a later row without a state must not claim it
