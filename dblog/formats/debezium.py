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

from dblog.core.model import ChangeEvent, Op, TableId, TableInfo
from dblog.formats.base import Record
from dblog.formats.changelog import (
    Change,
    ChangelogFormat,
    ChangelogOptions,
    Connector,
    parse_options,
)
from dblog.formats.coltypes import Family, parse_type
from dblog.formats.debezium_values import debezium_converter
from dblog.formats.rows import RowMapper
from dblog.spi import LocatedPosition


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

    def emits_tombstones(self) -> bool:
        """Its ``tombstones`` option decides (:class:`TombstonePolicy`)."""
        return self.options.tombstones

    def __init__(self, clock: Callable[[], float] = time.time, **options: Any) -> None:
        self.dbz = parse_options(DebeziumOptions, self.name, options)
        super().__init__(self.dbz, clock)
        self._txid: int | None = None
        self._total = 0
        self._per_table: Counter[tuple[str, str]] = Counter()
        self._templates: dict[tuple[Connector, TableId | None], dict[str, Any]] = {}
        self._positions: tuple[Any, int | None, str | None, dict[str, Any]] = (
            None, None, None, {})
        self._read_source: tuple[Any, Any] = (None, None)

    def mapper(self, family: Family, info: TableInfo) -> RowMapper:
        return RowMapper(self.name, info, {
            c.name: debezium_converter(parse_type(family, c.type_name)) for c in info.columns})

    def marker_records(self, event: ChangeEvent) -> list[Record]:
        """Debezium's transaction metadata records (``status`` BEGIN / END, END with the
        transaction's record counts per table), keyed by the transaction id; none when
        ``transaction_metadata`` is off."""
        if event.op is Op.BEGIN:
            self._start_transaction(event.txid)
        if not self.dbz.transaction_metadata or event.txid is None:
            return []
        connector = self.connector(event)
        txid = self._transaction_id(event, connector)
        ts = self.commit_millis(event.commit_ts)
        value: dict[str, Any] = {"status": "BEGIN" if event.op is Op.BEGIN else "END",
                                 "id": txid, "event_count": None, "data_collections": None,
                                 "ts_ms": self.now_millis() if ts is None else ts}
        if event.op is Op.COMMIT and event.txid == self._txid:
            value["event_count"] = self._total
            value["data_collections"] = [
                {"data_collection": f"{schema}.{name}", "event_count": count}
                for (schema, name), count in self._per_table.items()]
        return [Record(orjson.dumps({"id": txid}), orjson.dumps(value))]

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
        if change.kind == "delete" and self.options.tombstones and key is not None:
            records.append(Record(key, None))  # a keyless row has nothing to compact
        return records

    def _envelope(self, event: ChangeEvent, connector: Connector, change: Change,
                  before: Any, after: Any) -> dict[str, Any]:
        now = self.now_millis()
        source: Any
        if event.op is Op.READ:  # the rows of a chunk share their source block
            key = (connector, event.table, event.position, now)
            if key != self._read_source[0]:
                self._read_source = (key, orjson.Fragment(orjson.dumps(
                    self._source(event, connector))))
            source = self._read_source[1]
        else:
            source = self._source(event, connector)
        return {"before": before, "after": after, "source": source,
                "transaction": self._transaction(event, connector),
                "op": _OPS[change.kind], "ts_ms": now, "seq": event.seq}

    def _source(self, event: ChangeEvent, connector: Connector) -> dict[str, Any]:
        """The source block: the table's constant fields made once, then this event's."""
        template = self._templates.get((connector, event.table))
        if template is None:
            template = self._templates[(connector, event.table)] = self._template(
                connector, event)
        source = template.copy()
        ts = self.commit_millis(event.commit_ts)
        source["ts_ms"] = self.now_millis() if ts is None else ts
        if event.op is Op.READ:
            source["snapshot"] = "incremental"
        if connector == "postgresql":
            source["txId"] = event.txid
        source.update(self._position_fields(event, connector))
        return source

    def _template(self, connector: Connector, event: ChangeEvent) -> dict[str, Any]:
        table = event.table
        schema, name = (table.schema, table.name) if table else (None, None)
        common = {"version": dblog_version(), "connector": connector,
                  "name": self.dbz.server_name, "ts_ms": None, "snapshot": "false"}
        if connector == "postgresql":
            return {**common, "db": self.dbz.database, "sequence": None, "schema": schema,
                    "table": name, "txId": None, "lsn": None, "xmin": None,
                    "dblog_position": None}
        return {**common, "db": schema, "sequence": None, "table": name, "server_id": None,
                "gtid": None, "file": None, "pos": None, "row": None, "thread": None,
                "query": None, "dblog_position": None}

    def _position_fields(self, event: ChangeEvent, connector: Connector) -> dict[str, Any]:
        """The fields read from the event's position (the rows of a chunk share one, so the
        last is remembered)."""
        position, txid = event.position, event.txid
        cached = self._positions
        if txid == cached[1] and connector == cached[2] and (position is cached[0] or (
                type(position) is type(cached[0]) and position == cached[0])):
            return cached[3]
        text = None if position is None else str(position)
        kind = None if position is None else position.kind
        if connector == "postgresql":
            fields: dict[str, Any] = {"lsn": _lsn(text), "dblog_position": text}
        else:
            gtid = _gtid(text, kind, txid)
            file, pos = _binlog_file(position)
            fields = {"server_id": _server_id(gtid, connector), "gtid": gtid, "file": file,
                      "pos": pos, "dblog_position": text}
        self._positions = (position, txid, connector, fields)
        return fields

    def _transaction(self, event: ChangeEvent, connector: Connector) -> dict[str, Any] | None:
        if event.txid is None or event.table is None or not self.dbz.transaction_metadata:
            return None
        if event.txid != self._txid:  # no BEGIN seen (a stream that starts mid-transaction)
            self._start_transaction(event.txid)
        self._total += 1
        table = (event.table.schema, event.table.name)
        self._per_table[table] += 1
        return {"id": self._transaction_id(event, connector), "total_order": self._total,
                "data_collection_order": self._per_table[table]}

    def _transaction_id(self, event: ChangeEvent, connector: Connector) -> str:
        """The GTID on MySQL/MariaDB with GTIDs, else the source transaction id."""
        gtid = None if connector == "postgresql" else \
            self._position_fields(event, connector)["gtid"]
        return gtid or str(event.txid)

    def _start_transaction(self, txid: int | None) -> None:
        self._txid, self._total = txid, 0
        self._per_table.clear()


def _lsn(position: str | None) -> int | None:
    """``16/B374D848`` as the number Debezium's ``lsn`` carries."""
    if position is None:
        return None
    high, _, low = position.partition("/")
    return int(high, 16) << 32 | int(low, 16)


def _binlog_file(position: object) -> tuple[str | None, int | None]:
    """The binlog file and offset of a position (:class:`~dblog.spi.LocatedPosition`): a
    binlog position's own; a GTID position's when its log reader saw its commit (where the
    transaction ends; a dump row's position read back from the state has none)."""
    location = position.log_location if isinstance(position, LocatedPosition) else None
    return (None, None) if location is None else location


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
