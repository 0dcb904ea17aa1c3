"""canal-json: Canal's flat message, one row per message.

``{"data": [row], "database", "es", "id", "isDdl", "mysqlType", "old": [changed columns' old
values], "pkNames", "seq", "sql", "sqlType", "table", "ts", "type"}`` with every value a
string (:mod:`dblog.formats.canal_values`). ``type`` is ``INSERT`` (log inserts and dump rows),
``UPDATE``, ``DELETE`` or ``TRUNCATE`` (``isDdl`` true, no data). ``old`` holds only the
columns the update changed, as Canal sends it (a consumer takes the others from ``data``).
``id`` and ``seq`` are dblog's sequence number (replays repeat it); ``es`` is the commit time
(processing time for dump rows), ``ts`` the processing time. A key change is a ``DELETE`` of
the old row and an ``INSERT`` of the new one. PostgreSQL tables are carried too: ``database``
is the schema and ``mysqlType`` the PostgreSQL type. Records are keyed by the primary key as
an object of its column values (strings). The rules for before images, TOAST columns,
truncate and markers are in :mod:`dblog.formats.changelog`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson

from dblog.core.model import ChangeEvent, TableInfo
from dblog.formats.base import Record
from dblog.formats.canal_values import canal_converter, sql_type
from dblog.formats.changelog import (
    Change,
    ChangelogFormat,
    ChangelogOptions,
    parse_options,
)
from dblog.formats.coltypes import Family, parse_type
from dblog.formats.rows import RowMapper

_TYPES = {"insert": "INSERT", "read": "INSERT", "update": "UPDATE", "delete": "DELETE",
          "truncate": "TRUNCATE"}


class CanalFormat(ChangelogFormat):
    """The canal-json encoder."""

    name = "canal-json"

    def __init__(self, clock: Callable[[], float] = time.time, **options: Any) -> None:
        super().__init__(parse_options(ChangelogOptions, self.name, options), clock)
        self._types: dict[tuple[Family, TableInfo], tuple[dict[str, str], dict[str, int]]] = {}
        self._last_types: tuple[TableInfo | None, Family | None, tuple[Any, Any]] = (
            None, None, (None, None))

    def mapper(self, family: Family, info: TableInfo) -> RowMapper:
        return RowMapper(self.name, info, {
            c.name: canal_converter(parse_type(family, c.type_name)) for c in info.columns})

    def marker_records(self, event: ChangeEvent) -> list[Record]:
        """Canal's flat messages carry no transaction markers."""
        return []

    def emits_tombstones(self) -> bool:
        """Canal's consumers expect no null records (:class:`TombstonePolicy`)."""
        return False

    def records(self, event: ChangeEvent, info: TableInfo | None, change: Change
                ) -> list[Record]:
        if change.kind == "truncate" or info is None:
            return [Record(None, orjson.dumps(self._message(event, info, change, None, None)))]
        mapper = self.row_mapper(event, info)
        before = None if change.before is None else mapper.values(change.before)
        after = None if change.after is None else mapper.values(
            change.after if isinstance(change.after, dict) else change.after.decode())
        old = None
        if change.kind == "update" and after is not None and before is not None \
                and before.keys() >= self.column_names(info):
            old = [{name: before[name] for name, value in after.items()
                    if before.get(name) != value}]
        data = after if change.kind != "delete" else before
        message = self._message(event, info, change, None if data is None else [data], old)
        key = None if change.key is None else orjson.dumps(mapper.key(change.key))
        return [Record(key, orjson.dumps(message))]

    def _message(self, event: ChangeEvent, info: TableInfo | None, change: Change,
                 data: list[dict[str, Any]] | None, old: list[dict[str, Any]] | None
                 ) -> dict[str, Any]:
        table = event.table
        es = self.commit_millis(event.commit_ts)
        mysql_types, sql_types = self._column_types(event, info)
        truncate = change.kind == "truncate"
        return {
            "data": data, "database": table.schema if table else None,
            "es": self.now_millis() if es is None else es, "id": event.seq, "isDdl": truncate,
            "mysqlType": mysql_types, "old": old,
            "pkNames": list(info.key_columns) if info else None, "seq": event.seq,
            "sql": f"TRUNCATE TABLE {table}" if truncate else "", "sqlType": sql_types,
            "table": table.name if table else None, "ts": self.now_millis(),
            "type": _TYPES[change.kind]}

    def _column_types(self, event: ChangeEvent, info: TableInfo | None
                      ) -> tuple[dict[str, str] | None, dict[str, int] | None]:
        if info is None:
            return None, None
        family = self.family_of[self.connector(event)]
        last = self._last_types
        if last[0] is info and last[1] == family:
            return last[2]
        cached = self._types.get((family, info))
        if cached is None:
            cached = self._types[(family, info)] = (
                {c.name: c.type_name for c in info.columns},
                {c.name: sql_type(parse_type(family, c.type_name)) for c in info.columns})
        self._last_types = (info, family, cached)
        return cached
