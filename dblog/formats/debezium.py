"""debezium-json: Debezium's change event envelope, as its JSON converter writes it with
``schemas.enable=false``.

One record per change: ``{"before", "after", "source", "transaction", "op", "ts_ms", "seq"}``
keyed by the primary key as an object (``{"id": 1}``). ``op`` is ``c`` (insert), ``r`` (dump
row), ``u``, ``d`` or ``t``. A delete is followed by a tombstone (same key, null value) unless
``tombstones`` is off; a key change is a delete, a tombstone and a create, as Debezium sends
it. ``source`` carries the position as Debezium does per source (PostgreSQL ``lsn`` and
``txId``; MySQL/MariaDB ``file``/``pos`` or ``gtid``), ``snapshot`` (``incremental`` for dump
rows, which are read between watermarks like Debezium's incremental snapshots, ``false``
otherwise) and dblog's own ``dblog_position``. ``seq`` (dblog's sequence number) is an
addition to the envelope, like Debezium's own later ``ts_us``: replays repeat it, so a consumer
can drop duplicates. The rules for before images, TOAST columns, truncate and markers are in
:mod:`dblog.formats.changelog`; the value mapping in :mod:`dblog.formats.debezium_values`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import orjson

from dblog.core.model import ChangeEvent, Op, TableInfo
from dblog.formats.base import Record
from dblog.formats.changelog import (
    Change,
    ChangelogFormat,
    ChangelogOptions,
    Connector,
    commit_millis,
    parse_options,
)
from dblog.formats.coltypes import Family, parse_type
from dblog.formats.debezium_values import debezium_converter
from dblog.formats.rows import RowMapper


@lru_cache(maxsize=1)
def dblog_version() -> str:
    """``source.version``: ``dblog-<version>`` (read when first needed: the package's
    ``__init__`` may still be importing when this module is)."""
    import dblog

    return f"dblog-{dblog.__version__}"

_OPS = {"insert": "c", "read": "r", "update": "u", "delete": "d", "truncate": "t"}


class DebeziumOptions(ChangelogOptions):
    server_name: str = "dblog"
    """``source.name`` (Debezium's ``topic.prefix``)."""
    database: str | None = None
    """``source.db`` of PostgreSQL events: the database name (MySQL's is the table's schema)."""
    transaction_metadata: bool = True
    """The ``transaction`` block (id, total_order, data_collection_order) on log events."""


class DebeziumFormat(ChangelogFormat):
    """The debezium-json encoder; one per output (it counts events within transactions)."""

    name = "debezium-json"

    def __init__(self, clock: Callable[[], float] = time.time, **options: Any) -> None:
        self.dbz = parse_options(DebeziumOptions, self.name, options)
        super().__init__(self.dbz, clock)
        self._txid: int | None = None
        self._total = 0
        self._per_table: Counter[tuple[str, str]] = Counter()

    def mapper(self, family: Family, info: TableInfo) -> RowMapper:
        return RowMapper(self.name, info, {
            c.name: debezium_converter(parse_type(family, c.type_name)) for c in info.columns})

    def on_marker(self, event: ChangeEvent) -> None:
        if event.op is Op.BEGIN:
            self._start_transaction(event.txid)

    def records(self, event: ChangeEvent, info: TableInfo | None, change: Change
                ) -> list[Record]:
        connector = self.connector(event)
        if change.kind == "truncate" or info is None:
            value = self._envelope(event, connector, change, None, None)
            return [Record(None, orjson.dumps(value))]
        mapper = self.row_mapper(event, info)
        before = None if change.before is None else mapper.values(change.before)
        after = None if change.after is None else mapper.image(change.after)
        key = None if change.key is None else orjson.dumps(mapper.key(change.key))
        records = [Record(key, orjson.dumps(self._envelope(event, connector, change, before,
                                                          after)))]
        if change.kind == "delete" and self.options.tombstones:
            records.append(Record(key, None))
        return records

    def _envelope(self, event: ChangeEvent, connector: Connector, change: Change,
                  before: Any, after: Any) -> dict[str, Any]:
        return {"before": before, "after": after, "source": self._source(event, connector),
                "transaction": self._transaction(event, connector),
                "op": _OPS[change.kind], "ts_ms": self.now_millis(), "seq": event.seq}

    def _source(self, event: ChangeEvent, connector: Connector) -> dict[str, Any]:
        table, position = event.table, event.position
        ts = commit_millis(event.commit_ts)
        common = {"version": dblog_version(), "connector": connector, "name": self.dbz.server_name,
                  "ts_ms": self.now_millis() if ts is None else ts,
                  "snapshot": "incremental" if event.op is Op.READ else "false"}
        where = {"schema": table.schema if table else None,
                 "table": table.name if table else None}
        dblog_position = None if position is None else str(position)
        if connector == "postgresql":
            return {**common, "db": self.dbz.database, "sequence": None, **where,
                    "txId": event.txid, "lsn": _lsn(dblog_position), "xmin": None,
                    "dblog_position": dblog_position}
        file, pos = _binlog_file(dblog_position, position.kind if position else None)
        gtid = _gtid(dblog_position, position.kind if position else None, event.txid)
        return {**common, "db": where["schema"], "sequence": None, "table": where["table"],
                "server_id": _server_id(gtid, connector), "gtid": gtid, "file": file,
                "pos": pos, "row": None, "thread": None, "query": None,
                "dblog_position": dblog_position}

    def _transaction(self, event: ChangeEvent, connector: Connector) -> dict[str, Any] | None:
        if event.txid is None or event.table is None or not self.dbz.transaction_metadata:
            return None
        if event.txid != self._txid:  # no BEGIN seen (a stream that starts mid-transaction)
            self._start_transaction(event.txid)
        self._total += 1
        self._per_table[(event.table.schema, event.table.name)] += 1
        position = None if event.position is None else str(event.position)
        gtid = None if connector == "postgresql" else _gtid(
            position, event.position.kind if event.position else None, event.txid)
        return {"id": gtid or str(event.txid), "total_order": self._total,
                "data_collection_order": self._per_table[(event.table.schema,
                                                          event.table.name)]}

    def _start_transaction(self, txid: int | None) -> None:
        self._txid, self._total = txid, 0
        self._per_table.clear()


def _lsn(position: str | None) -> int | None:
    """``16/B374D848`` as the number Debezium's ``lsn`` carries."""
    if position is None:
        return None
    high, _, low = position.partition("/")
    return int(high, 16) << 32 | int(low, 16)


def _binlog_file(position: str | None, kind: str | None) -> tuple[str | None, int | None]:
    """``mysql-bin.000003:1234`` -> (file, pos) for binlog positions; GTID positions have no
    file and offset."""
    if position is None or kind != "binlog":
        return None, None
    file, _, pos = position.rpartition(":")
    return file, int(pos)


def _gtid(position: str | None, kind: str | None, txid: int | None) -> str | None:
    """The transaction's own GTID: the domain entry of a MariaDB GTID position whose sequence
    number is the transaction id, or ``uuid:gno`` of a MySQL GTID set."""
    if position is None or txid is None:
        return None
    if kind == "mariadb-gtid":
        for part in position.split(","):
            if part.rsplit("-", 1)[-1] == str(txid):
                return part
    if kind == "mysql-gtid":
        for part in position.split(","):
            sid, _, ranges = part.partition(":")
            if any(r.rpartition("-")[2] == str(txid) for r in ranges.split(":")):
                return f"{sid}:{txid}"
    return None


def _server_id(gtid: str | None, connector: Connector) -> int | None:
    if gtid is None or connector != "mariadb":
        return None
    return int(gtid.split("-")[1])
