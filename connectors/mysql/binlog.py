"""The binlog stream: mysql-replication wrapped in an adapter that owns reconnection,
positions and transaction boundaries.

Positions: MariaDB GTID positions, MySQL GTID sets, or binlog file and offset (flavor.py). A
COMMIT (XID event, ``COMMIT`` query, or the end of a DDL statement) carries the position after
its transaction; resuming from it replays nothing before and skips nothing after. A DDL
statement ends its transaction only when nothing else belongs to it (a standalone MariaDB GTID,
or no GTID or BEGIN before it); ``CREATE TABLE ... SELECT`` is one transaction (DDL, rows, XID).
A row change logged as a statement stops the stream (statements.py).

Reconnection: mysql-replication would reconnect by itself from a position it tracks per event
(or, with GTIDs, from the position it was started at). The adapter's connection class
(fastpath.py) turns a lost connection into :class:`StreamLost` instead, and the reader
reconnects from the last commit it handed out, with backoff on the injected clock for up to
``reconnect_timeout_s`` (a server restart); if the connection dropped inside a transaction, the
items of it already handed out are counted and skipped when the server sends that transaction
again, so nothing is re-read. If the server stays away longer, the error is retryable and the
pipeline restarts from its committed state (at-least-once replay from there).

First start: with no committed position the reader starts at the server's current position,
and records it (``StartRecord``) before it hands out anything; a restart before the first
commit resumes from that record instead of from "now", and the first acknowledged position
drops it.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from dblog.connectors.mysql.positions import BinlogPosition, MariadbGtid, MysqlGtidSet
from dblog.core.model import ChangeEvent, LogItem, Op
from dblog.core.positions import Position
from dblog.errors import DblogError, RetryableSourceError
from dblog.runtime.clock import SystemClock
from dblog.spi import Clock

from .db import Endpoint
from .decoder import BinlogDecoder, parse_ddl
from .errors import DRIVER_ERRORS, classify, decode_error
from .fastpath import FastPath, GuardedConnection, readable
from .flavor import Flavor
from .retry import with_backoff
from .statements import Kind, kind_of, opens_transaction, refuse_statement_rows, text_of

log = logging.getLogger("dblog.connectors.mysql")

MAX_BATCH = 4096
_EVENTS = [MariadbGtidEvent, GtidEvent, QueryEvent, XidEvent, WriteRowsEvent, UpdateRowsEvent,
           DeleteRowsEvent, HeartbeatLogEvent, RotateEvent]
_ROW_OPS = {WriteRowsEvent: Op.INSERT, UpdateRowsEvent: Op.UPDATE, DeleteRowsEvent: Op.DELETE}
_STANDALONE = 1  # MariaDB GTID flag: no XID or COMMIT ends this transaction (DDL)


class StartRecord(Protocol):
    """Where a first run records its start position durably (the connector keeps it in the
    watermark table); ``forget`` once the state store holds a committed position."""

    def load(self) -> Position | None: ...

    def save(self, position: Position) -> None: ...

    def forget(self) -> None: ...


def _ts(seconds: int) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S+00")


class MysqlLogReader:
    """A :class:`dblog.spi.LogReader` over one binlog connection."""

    def __init__(self, endpoint: Endpoint, server_id: int, flavor: Flavor,
                 decoder: BinlogDecoder, current_position: Callable[[], Position],
                 heartbeat_s: float = 0.02, only_schemas: Sequence[str] | None = None,
                 report_name: str = "dblog", start_record: StartRecord | None = None,
                 clock: Clock | None = None, reconnect_timeout_s: float = 120.0) -> None:
        self.endpoint = endpoint
        self.start_record = start_record
        self.clock: Clock = clock or SystemClock()
        self.reconnect_timeout_s = reconnect_timeout_s
        self._start_forgotten = False
        self.server_id = server_id
        self.flavor = flavor
        self.decoder = decoder
        self.current_position = current_position
        self.heartbeat_s = heartbeat_s
        self.only_schemas = list(only_schemas) if only_schemas else None
        self.report_name = report_name
        self._stream: BinLogStreamReader | None = None
        self._committed: Position | None = None
        self._tx_position: Position | None = None
        self._txid: int | None = None
        self._ends_with_commit = False  # the open transaction ends at an XID or COMMIT query
        self._ts: str | None = None
        self._handed = 0  # items of the open transaction handed out
        self._pending: list[LogItem] = []  # items the fast path decoded inside a fetch
        self._fast = FastPath(self._fast_rows, self._checksum)
        self._skip = 0  # items to drop after a reconnect inside a transaction

    # -- connection -----------------------------------------------------------------------

    def start(self, position: Position | None) -> None:
        if position is None:
            position = self._first_start()
        self._committed = position
        self._open()

    def _first_start(self) -> Position:
        """The recorded start of an earlier run that never committed, else the server's
        current position, recorded before anything is handed out."""
        recorded = self.start_record.load() if self.start_record is not None else None
        if recorded is not None:
            log.warning("no committed position: resuming from the start position recorded by "
                        "an earlier run, %s", recorded)
            return recorded
        position = self.current_position()
        if self.start_record is not None:
            self.start_record.save(position)
        return position

    def _open(self) -> None:
        assert self._committed is not None
        args = self.flavor.stream_arguments(self._committed)
        gtids = isinstance(self._committed, MariadbGtid)
        self._fast = FastPath(  # table ids are per connection
            self._fast_rows, self._checksum, self._fast_gtid if gtids else None,
            self._fast_xid if gtids else None)
        wrapper = type("FastGuardedConnection", (GuardedConnection,), {"fast_path": self._fast})
        try:
            self._stream = BinLogStreamReader(
                connection_settings=self.endpoint.replication_settings(),
                server_id=self.server_id, blocking=True, only_events=_EVENTS,
                freeze_schema=True,
                slave_heartbeat=self.heartbeat_s, pymysql_wrapper=wrapper,
                only_schemas=self.only_schemas, enable_logging=False,
                report_slave=(self.report_name, self.endpoint.user, "", 0),
                slave_uuid=str(uuid.uuid5(uuid.NAMESPACE_DNS, self.report_name)), **args)
        except DRIVER_ERRORS as exc:
            raise classify(exc, "opening the binlog stream") from exc

    def _reconnect(self, cause: BaseException) -> None:
        log.warning("binlog connection lost (%s); reconnecting from %s, skipping %d item(s) "
                    "of the open transaction", cause, self._committed, self._handed)
        self._close_stream()
        # rows the fast path decoded but poll never took are not out: read them again
        self._handed -= len(self._pending)
        self._pending = []
        # the server sends the open transaction again from its start: skip all of it that was
        # handed out (also when this drop came while still skipping after an earlier one)
        self._skip = self._handed
        self._tx_position = self._txid = None
        self._ends_with_commit = False
        self._open()

    def _fetch_once(self) -> Any:
        """One event; a lost or refused connection reconnects (from the last commit) and
        raises the retryable error, so :func:`with_backoff` tries again."""
        if self._stream is None:
            self._open()
        assert self._stream is not None
        try:
            return self._stream.fetchone()
        except DRIVER_ERRORS as exc:
            error = classify(exc, "reading the binlog")
            if error.retryable:
                self._reconnect(exc)
            raise error from exc

    def _fetch(self) -> Any:
        try:
            return self._fetch_once()
        except DblogError as exc:
            if not exc.retryable:
                raise
        # the connection dropped: the server may be restarting
        return with_backoff(self._fetch_once, self.clock, self.reconnect_timeout_s,
                            "reconnecting the binlog stream")

    # -- events ---------------------------------------------------------------------------

    def poll(self, timeout: float) -> list[LogItem]:
        if self._stream is None:
            raise RetryableSourceError("the binlog stream is not started")
        items: list[LogItem] = []
        deadline = time.monotonic() + timeout
        while len(items) < MAX_BATCH:
            # inside a transaction the rest of it is already in the binlog (the server writes
            # a transaction at its commit): only between transactions can the next fetch wait
            if items and self._txid is None and not readable(self._stream):
                break  # return what we have rather than wait for the next event
            event = self._fetch()
            if event is None:
                raise RetryableSourceError("the server ended the binlog stream")
            if self._pending:  # rows the fast path decoded come before this event
                items += self._pending
                self._pending = []
                self._fast.held = 0
            packet = getattr(event, "packet", None)
            if not isinstance(event, HeartbeatLogEvent):
                self._on_event(event, items, packet)  # reads the rows through the packet
            # mysql-replication's event and its packet wrapper refer to each other: break the
            # cycle, or every event waits for the cyclic collector (which the engine runs
            # rarely) and memory grows by kilobytes per event in the meantime
            event.packet = None
            if isinstance(event, HeartbeatLogEvent):
                if self._fast.replaced:  # stands for a row event or table map
                    self._fast.replaced = False
                elif items or time.monotonic() >= deadline:
                    break
                continue
            if items and time.monotonic() >= deadline:
                break
        return items

    def _hand(self, out: list[LogItem], produced: Sequence[LogItem]) -> None:
        if self._skip == 0:  # the usual case: no reconnect inside this transaction
            out += produced
            self._handed += len(produced)
            return
        for item in produced:
            if self._skip > 0:
                self._skip -= 1
                continue
            self._handed += 1
            out.append(item)

    def _on_event(self, event: Any, out: list[LogItem], packet: Any) -> None:
        kind = type(event)
        op = _ROW_OPS.get(kind)
        if op is not None:
            position = self._tx_position or self._file_position(packet)
            try:
                self._hand(out, self.decoder.rows(event, op, position, self._txid, self._ts))
            except UnicodeDecodeError as exc:
                raise decode_error(exc, f"{event.schema}.{event.table}", [
                    c.name for c in event.columns if c.character_set_name not in (
                        None, "binary")]) from exc
            self._fast.learn(event.table_id, self.decoder.plan_for(event))
        elif kind is MariadbGtidEvent:
            self._fast_gtid(event.domain_id, event.server_id, event.gtid_seq_no,
                            event.timestamp, event.flags, out)
        elif kind is GtidEvent:
            sid, _, gno = event.gtid.partition(":")
            if isinstance(self._committed, MysqlGtidSet):
                self._begin(out, self._committed.with_gtid(sid, int(gno)), int(gno),
                            event.timestamp)
            else:  # resuming by file and offset (GTIDs turned on since): positions stay files
                self._begin(out, None, _file_txid(self._file_position(packet)), event.timestamp)
        elif kind is XidEvent:
            self._commit(out, self._tx_position or self._file_position(packet),
                         int(packet.log_pos))
        elif kind is QueryEvent:
            self._on_query(event, out, packet)
        elif kind is RotateEvent and self._stream is not None:
            # table ids are per server run: after a crash the next file starts with only a
            # "fake" rotate, on which mysql-replication keeps its (frozen) table maps
            self._stream.table_map.clear()

    def _begin(self, out: list[LogItem], position: Position | None, txid: int,
               timestamp: int) -> None:
        self._tx_position, self._txid, self._ts = position, txid, _ts(timestamp)
        self._ends_with_commit = False  # until a BEGIN query or a GTID's flags say otherwise
        if self._skip == 0:  # a new transaction; one left open (nothing of it captured) ends
            self._handed = 0
        self._hand(out, [ChangeEvent(Op.BEGIN, None, txid=txid, commit_ts=self._ts,
                                     position=position)])

    def _on_query(self, event: Any, out: list[LogItem], packet: Any) -> None:
        query = text_of(event)
        kind = kind_of(query)
        if kind is Kind.SKIP:
            return
        if kind is Kind.COMMIT:
            self._commit(out, self._tx_position or self._file_position(packet),
                         int(packet.log_pos))
            return
        if self._txid is None:  # no GTIDs (a BEGIN query), or a DDL statement of its own
            self._begin(out, None, _file_txid(self._file_position(packet)), event.timestamp)
        if kind is Kind.BEGIN:
            self._ends_with_commit = True
            return
        schema = event.schema.decode() if isinstance(event.schema, bytes) else event.schema
        if kind is Kind.DML:  # stops on a captured table; another's is not ours
            refuse_statement_rows(query, schema or "", self.decoder.captured)
        else:
            self._on_ddl(query, schema or "", out, packet)
        if not self._ends_with_commit:  # DDL commits implicitly
            self._commit(out, self._tx_position or self._file_position(packet),
                         int(packet.log_pos))

    def _on_ddl(self, query: str, schema: str, out: list[LogItem], packet: Any) -> None:
        position = self._tx_position or self._file_position(packet)
        produced = self.decoder.ddl(query, schema, position, self._txid, self._ts)
        self._forget_table_maps(query, schema)
        self._hand(out, produced)
        if opens_transaction(query):  # MySQL's CREATE TABLE ... SELECT: the XID ends it
            self._ends_with_commit = True

    def _forget_table_maps(self, query: str, schema: str) -> None:
        """``freeze_schema`` makes mysql-replication parse a table map once per table id (the
        parse costs more than the rows of a one-row statement); after DDL the table's cached
        maps are dropped, in case the server reuses the table id."""
        tables = {(t.schema, t.name) for t in parse_ddl(query, schema)[1]}
        self._fast.forget()
        if self._stream is None or not tables:
            return
        table_map = self._stream.table_map
        for table_id, table in list(table_map.items()):
            if (table.schema, table.table) in tables:
                del table_map[table_id]

    def _fast_rows(self, op: Op, plan: Any, images: list[dict[str, Any]], log_pos: int) -> None:
        """The fast path's rows of one event (fastpath.py), handed like the normal path's."""
        assert self._stream is not None
        position = self._tx_position or BinlogPosition(self._stream.log_file or "", log_pos)
        self._hand(self._pending, self.decoder.from_images(plan, op, images, position,
                                                           self._txid, self._ts))

    def _fast_gtid(self, domain: int, server_id: int, seq: int, timestamp: int, flags: int,
                   out: list[LogItem] | None = None) -> None:
        """A MariaDB GTID event (``out``: None when the fast path consumed it): the
        transaction begins; unless standalone, it ends with an XID or COMMIT."""
        assert isinstance(self._committed, MariadbGtid)
        self._begin(self._pending if out is None else out,
                    self._committed.with_gtid(domain, server_id, seq), seq, timestamp)
        self._ends_with_commit = not flags & _STANDALONE

    def _fast_xid(self, log_pos: int) -> None:
        """An XID event the fast path consumed (then returned at once): the transaction
        commits. Nothing is read between this and poll taking the pending items, so a
        reconnect never drops a pending commit."""
        assert self._stream is not None
        self._commit(self._pending, self._tx_position or BinlogPosition(
            self._stream.log_file or "", log_pos), log_pos)

    def _checksum(self) -> bool:
        """Whether this stream's events end in a CRC32 (what mysql-replication negotiated)."""
        return bool(self._stream is not None
                    and self._stream._BinLogStreamReader__use_checksum)

    def _commit(self, out: list[LogItem], position: Position, log_pos: int) -> None:
        """The transaction commits at ``position``; its commit event ends at ``log_pos`` of the
        current binlog (recorded on a GTID position for the API's lag in bytes,
        dblog/api/lagbytes.py)."""
        if isinstance(position, (MariadbGtid, MysqlGtidSet)) and self._stream is not None:
            position = position.at(self._stream.log_file or "", log_pos)
        self._hand(out, [ChangeEvent(Op.COMMIT, None, txid=self._txid, commit_ts=self._ts,
                                     position=position)])
        self._committed = position
        self._tx_position = self._txid = None
        self._ends_with_commit = False
        self._handed = self._skip = 0

    def _file_position(self, packet: Any) -> Position:
        """Where the event ends (``packet``: mysql-replication's packet wrapper of it)."""
        assert self._stream is not None
        return BinlogPosition(self._stream.log_file or "", int(packet.log_pos))

    def acknowledge(self, position: Position) -> None:
        """Nothing to confirm to the server (the binlog has no slot; its retention must cover
        downtime). The first commit makes the recorded start position redundant."""
        if not self._start_forgotten and self.start_record is not None:
            self.start_record.forget()
            self._start_forgotten = True

    def _close_stream(self) -> None:
        if self._stream is not None:
            with contextlib.suppress(Exception):  # closing a dead connection may fail again
                self._stream.close()
            self._stream = None

    def close(self) -> None:
        self._close_stream()


def _file_txid(position: Position) -> int:
    if isinstance(position, BinlogPosition):
        number = position.file.rpartition(".")[2]
        return (int(number) if number.isdigit() else 0) << 32 | position.pos
    return 0
