"""Row events of known tables decoded as they come off the socket, before mysql-replication
builds its event objects for them.

mysql-replication's framing (a packet wrapper and an event object per binlog event, a table
map parsed for every row event of a one-row statement) costs about as much as decoding the
rows. For a table id whose table map was already seen with the same bytes, and whose rows the
connector decodes itself (rowcodec.py), the connection hands each row event's bytes here: the
rows are decoded into log items at once. A row event or table map is always followed by more of
its transaction, which is already in the binlog, so the connection reads on without returning
to mysql-replication until ``HELD`` rows are waiting (memory stays bounded by that and one
event); then mysql-replication gets a heartbeat standing in for the events consumed, so its
position bookkeeping still moves. Repeated table maps of such tables are consumed the same way.
With MariaDB GTID positions, a transaction's GTID event (its begin) and XID event (its commit)
are consumed too, whatever its tables; after an XID the connection returns at once (the next
transaction may not be written yet), so a commit never waits in the reader. Everything else
(MySQL GTID, query, rotate events, first table maps, first row events of a table id, tables with
columns the connector does not decode) takes mysql-replication's path unchanged. A rotate or a
DDL statement forgets every table id.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import pymysql

from dblog.core.model import Op
from dblog.errors import FatalSourceError

from .binformats import is_text
from .errors import StreamLost, decode_error
from .rowcodec import K_UTF8

_HEADER = struct.Struct("<xIBIIIH")  # OK byte, then the 19-byte event header
_TABLE_MAP, _ROTATE, _HEARTBEAT, _MARIADB_GTID, _XID = 19, 4, 27, 162, 16
_ROWS = {23: Op.INSERT, 24: Op.UPDATE, 25: Op.DELETE, 30: Op.INSERT, 31: Op.UPDATE,
         32: Op.DELETE}
RowsSink = Callable[[Op, Any, list[dict[str, Any]], int], None]
GtidSink = Callable[[int, int, int, int, int], None]  # domain, server id, seq. number, time, flags
XidSink = Callable[[int], None]  # the log position after the committed transaction
_OURS = frozenset({_TABLE_MAP, _ROTATE, _MARIADB_GTID, _XID})
HELD = 1024  # decoded rows that may wait before mysql-replication is handed a stand-in
_LOST = frozenset({2006, 2013})
# events that carry rows or statements mysql-replication cannot read (it would skip them):
# MariaDB's compressed query and row events, MySQL's partial JSON updates and compressed
# transaction payloads; each with the setting that makes the server write them
_UNREADABLE = {**{kind: ("a compressed event", "log_bin_compress = OFF", "log_bin_compress=OFF")
                  for kind in range(0xA5, 0xAC)},
               0x27: ("a partial JSON update", "binlog_row_value_options = ''",
                      "binlog_row_value_options="),
               0x28: ("a compressed transaction", "binlog_transaction_compression = OFF",
                      "binlog_transaction_compression=OFF")}


_MAX_PACKET = 0xFFFFFF  # a payload this long continues in the next packet


def read_payload(conn: Any) -> bytes:
    """The next packet's payload off a PyMySQL connection, read as its ``_read_packet`` reads
    it (sequence numbers, payloads split over several packets, the same errors) but without
    building a packet object: the fast path consumes most packets of its read-on loop. Only
    called after ``_read_packet`` has set the socket's read timeout."""
    read: Callable[[int], bytes] = conn._rfile.read
    parts: list[bytes] = []
    while True:
        try:
            header = read(4)
            if len(header) < 4:
                raise OSError("the connection was closed")
            if header[3] != conn._next_seq_id:
                conn._force_close()
                if header[3] == 0:  # MariaDB shutting down
                    raise OSError("the server is shutting down")
                raise pymysql.err.InternalError(
                    f"Packet sequence number wrong - got {header[3]} expected "
                    f"{conn._next_seq_id}")
            conn._next_seq_id = (header[3] + 1) & 0xFF
            size = header[0] | header[1] << 8 | header[2] << 16
            data = read(size)
            if len(data) < size:
                raise OSError("the connection was closed")
        except OSError as exc:
            conn._force_close()
            raise StreamLost(f"Lost connection to MySQL server during query ({exc})") from exc
        if size < _MAX_PACKET and not parts:
            return data
        parts.append(data)
        if size < _MAX_PACKET:
            return b"".join(parts)


def readable(stream: Any) -> bool:
    """Whether the next binlog packet of a mysql-replication stream is already buffered or on
    the socket (a peek with the socket non-blocking for a moment). An EOF reads as not
    readable: the next fetch fails."""
    conn = getattr(stream, "_stream_connection", None)
    sock, rfile = getattr(conn, "_sock", None), getattr(conn, "_rfile", None)
    if sock is None or rfile is None:
        return True
    timeout = sock.gettimeout()
    sock.settimeout(0.0)
    try:
        return bool(rfile.peek(1))
    except OSError:
        return False
    finally:
        sock.settimeout(timeout)


def _length_coded(data: bytes, pos: int) -> tuple[int, int]:
    first = data[pos]
    if first < 251:
        return first, pos + 1
    width = {252: 2, 253: 3, 254: 8}[first]
    return int.from_bytes(data[pos + 1:pos + 1 + width], "little"), pos + 1 + width


class FastPath:
    """Per stream connection: which table ids decode here, and the decoding (see above).
    ``sink(op, plan, images, log_pos)`` receives each intercepted event's rows."""

    def __init__(self, sink: RowsSink, checksum: Callable[[], bool],
                 gtid_sink: GtidSink | None = None, xid_sink: XidSink | None = None) -> None:
        self.sink = sink
        # with MariaDB GTIDs, a transaction's GTID and XID events are consumed too
        self.gtid_sink, self.xid_sink = gtid_sink, xid_sink
        self.ended = False  # the last event consumed was an XID: return before reading on
        self._checksum_of = checksum  # known once the stream is connected
        self.checksum: int | None = None
        self.replaced = False  # the last packet returned was a stand-in heartbeat
        self.held = 0  # rows decoded since the reader last took them
        self._last = (0, 0, 0)  # timestamp, server id, log position of the last event consumed
        self.maps: dict[int, bytes] = {}  # table id -> its last table map's body
        self.plans: dict[int, Any] = {}  # table id -> the decoder's TablePlan (None: skip)

    def learn(self, table_id: int, plan: Any) -> None:
        """The normal path decoded a row event of ``table_id`` with ``plan``."""
        if table_id in self.maps and (plan is None or plan.codec is not None):
            self.plans[table_id] = plan

    def forget(self) -> None:
        self.maps.clear()
        self.plans.clear()

    def intercept(self, data: bytes) -> bool:
        """Whether the packet was a binlog event consumed here."""
        if len(data) < 26 or data[0] != 0:
            return False
        timestamp, kind, server_id, size, log_pos, _ = _HEADER.unpack_from(data)
        if size != len(data) - 1 or (kind not in _ROWS and kind not in _OURS):
            return size == len(data) - 1 and _not_ours(kind)  # a reply, or not ours
        if self.checksum is None:
            self.checksum = 4 if self._checksum_of() else 0
        if kind == _ROTATE:
            self.forget()
            return False
        if kind == _MARIADB_GTID:
            if self.gtid_sink is None:
                return False
            # the body: sequence number (8 bytes), domain id (4), flags
            self.gtid_sink(int.from_bytes(data[28:32], "little"), server_id,
                           int.from_bytes(data[20:28], "little"), timestamp, data[32])
            self._last = (timestamp, server_id, log_pos)
            return True
        if kind == _XID:
            if self.xid_sink is None:
                return False
            self.xid_sink(log_pos)
            self._last, self.ended = (timestamp, server_id, log_pos), True
            return True
        table_id = int.from_bytes(data[20:26], "little")
        end = len(data) - (self.checksum or 0)
        if kind == _TABLE_MAP:
            body = data[20:end]
            if self.maps.get(table_id) != body or table_id not in self.plans:
                self.maps[table_id] = body
                self.plans.pop(table_id, None)
                return False
        elif table_id in self.plans:
            self._rows(kind, self.plans[table_id], data, end, log_pos)
        else:
            return False
        self._last = (timestamp, server_id, log_pos)
        return True

    def _rows(self, kind: int, plan: Any, data: bytes, end: int, log_pos: int) -> None:
        if plan is None:
            return  # a table that is not captured
        op = _ROWS[kind]
        pos = 28  # after the table id and the flags
        if kind >= 30:  # v2 events carry extra data
            pos += int.from_bytes(data[pos:pos + 2], "little")
        count, pos = _length_coded(data, pos)
        codec, bitmap = plan.codec, (count + 7) // 8
        present = data[pos:pos + bitmap]
        pos += bitmap
        if present != codec.full:  # raises: binlog_row_image is not FULL
            codec.check_present([present], plan.table)
        if op is Op.UPDATE:
            present = data[pos:pos + bitmap]
            pos += bitmap
            if present != codec.full:
                codec.check_present([present], plan.table)
        try:
            images = codec.decode(data, pos, end)
        except UnicodeDecodeError as exc:
            text = [c.name for c in codec.columns if c.spec[0] == K_UTF8 or is_text(c.spec[4])]
            raise decode_error(exc, plan.table, text) from exc
        self.held += len(images)
        self.sink(op, plan, images, log_pos)

    def stand_in(self) -> bytes:
        """A heartbeat for mysql-replication in place of the events consumed last."""
        timestamp, server_id, log_pos = self._last
        self.replaced = True
        checksum = self.checksum or 0
        return _HEADER.pack(timestamp, _HEARTBEAT, server_id, 19 + checksum, log_pos, 0) + bytes(
            checksum)


def _not_ours(kind: int) -> bool:
    """False: mysql-replication reads the event; an event nobody can read stops the stream."""
    if kind not in _UNREADABLE:
        return False
    what, statement, setting = _UNREADABLE[kind]
    raise FatalSourceError(
        f"the binlog holds {what} (event type {kind}), which the connector cannot read: its "
        "changes would be lost",
        fix=f"SET GLOBAL {statement}; and set {setting} in my.cnf [mysqld]; the binlog "
            "already written keeps such events, so remove the pipeline's state and request a "
            "full dump to start over")


class GuardedConnection(pymysql.connections.Connection):  # type: ignore[misc]
    """A PyMySQL connection whose lost-connection errors escape mysql-replication's own
    reconnect loop (binlog.py's module docstring), and which reads on through a transaction's
    row events and table maps (this module's)."""

    fast_path: FastPath | None = None  # set on a per-stream subclass (MysqlLogReader._open)

    def _read_packet(self, packet_type: Any = pymysql.connections.MysqlPacket) -> Any:
        packet = self._read_one(packet_type)
        fast = self.fast_path
        if fast is None or not fast.intercept(packet._data):
            return packet
        # the rest of a transaction is already on its way, the next one may not be
        while fast.held < HELD and not fast.ended:
            data = read_payload(self)
            if not fast.intercept(data):
                return self._read_one(packet_type, data)
        fast.ended = False
        return packet_type(fast.stand_in(), self.encoding)

    def _read_one(self, packet_type: Any, data: bytes | None = None) -> Any:
        """The next packet (or the one of ``data``, already read), as ``_read_packet``."""
        try:
            if data is None:
                return super()._read_packet(packet_type)
            packet = packet_type(data, self.encoding)
            if packet.is_error_packet():
                packet.raise_for_error()
            return packet
        except pymysql.err.OperationalError as exc:
            if exc.args and exc.args[0] in _LOST:
                raise StreamLost(str(exc)) from exc
            raise
