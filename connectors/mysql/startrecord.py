"""The start position of a first run, kept in this instance's watermark table until the state
store holds a committed position.

Without it, a pipeline killed before its first commit would start again at the server's
position of that moment and skip everything written in between. The record is a second row of
the watermark table (``<instance>@start``), which the log decoder ignores like any row that is
not this instance's watermark. A position longer than the value column (a MySQL GTID set of
very many servers) is not recorded; that is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from dblog.core.model import TableId
from dblog.core.positions import Position, decode_position

from .db import query, quote

log = logging.getLogger("dblog.connectors.mysql")
VALUE_LENGTH = 191  # the watermark table's value column (setup.ensure_watermark_table)



def start_row(instance: str) -> str:
    """The name of the row that records ``instance``'s first start."""
    return f"{instance}@start"

class WatermarkStartRecord:
    """A :class:`connectors.mysql.binlog.StartRecord` in the watermark table."""

    def __init__(self, conn: Callable[[], Any], table: TableId, instance: str) -> None:
        self.conn = conn
        self.name = start_row(instance)
        self.table = f"{quote(table.schema)}.{quote(table.name)}"

    def load(self) -> Position | None:
        rows = query(self.conn(), f"SELECT value FROM {self.table} WHERE name = %s",
                     (self.name,), "reading the recorded start position")
        return decode_position(str(rows[0][0])) if rows else None

    def save(self, position: Position) -> None:
        value = position.encode()
        if len(value) > VALUE_LENGTH:
            log.warning("start position %s is too long to record; a restart before the first "
                        "commit starts at the position of that moment", value)
            return
        query(self.conn(), f"INSERT INTO {self.table} (name, value) VALUES (%s, %s) ON "
              "DUPLICATE KEY UPDATE value = VALUES(value)", (self.name, value),
              "recording the start position")

    def forget(self) -> None:
        query(self.conn(), f"DELETE FROM {self.table} WHERE name = %s", (self.name,),
              "dropping the recorded start position")
