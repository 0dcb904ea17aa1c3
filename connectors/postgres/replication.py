"""The wal2json stream over PostgreSQL's streaming replication protocol (psycopg's libpq layer).

``START_REPLICATION SLOT ... LOGICAL`` puts the connection in COPY_BOTH mode; the server sends
XLogData (``w``) and keepalive (``k``) messages, the client answers with standby status updates
(``r``) whose flush position is only ever what every output acknowledged.
"""

from __future__ import annotations

import select
import struct
import time
from collections.abc import Callable

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dblog.connectors.postgres.positions import Lsn
from dblog.core.model import LogItem
from dblog.core.positions import Position
from dblog.errors import FatalSourceError, RetryableSourceError
from dblog.runtime.wakeup import Wakeup

from .errors import classify
from .wal2json import WAL2JSON_OPTIONS, Wal2JsonDecoder

_LSN = struct.Struct(">Q")
_STATUS = struct.Struct(">cQQQqB")
_PG_EPOCH_US = 946_684_800_000_000
FEEDBACK_INTERVAL_S = 5.0
MAX_BATCH = 4096


# PostgreSQL server encodings -> Python codecs. wal2json writes in the database's encoding and
# the walsender does not convert it (client_encoding does not apply to the replication stream).
_CODECS = {
    "UTF8": "utf-8", "SQL_ASCII": "utf-8",  # SQL_ASCII: bytes as stored, read as UTF-8
    "LATIN1": "iso8859-1", "LATIN2": "iso8859-2", "LATIN3": "iso8859-3", "LATIN4": "iso8859-4",
    "LATIN5": "iso8859-9", "LATIN6": "iso8859-10", "LATIN7": "iso8859-13",
    "LATIN8": "iso8859-14", "LATIN9": "iso8859-15", "LATIN10": "iso8859-16",
    "ISO_8859_5": "iso8859-5", "ISO_8859_6": "iso8859-6", "ISO_8859_7": "iso8859-7",
    "ISO_8859_8": "iso8859-8", "KOI8R": "koi8-r", "KOI8U": "koi8-u", "WIN866": "cp866",
    "WIN874": "cp874", **{f"WIN{n}": f"cp{n}" for n in range(1250, 1259)},
    "EUC_CN": "gb2312", "EUC_JP": "euc_jp", "EUC_JIS_2004": "euc_jis_2004", "EUC_KR": "euc_kr",
}
_ENCODING_FIX = ("move the captured tables to a database created with ENCODING 'UTF8' "
                 "(CREATE DATABASE ... ENCODING 'UTF8' TEMPLATE template0)")


def python_codec(server_encoding: str) -> str:
    """The Python codec that reads text in the server encoding ``server_encoding``."""
    codec = _CODECS.get(server_encoding.upper())
    if codec is None:
        raise FatalSourceError(
            f"the database encoding {server_encoding} has no Python codec: wal2json messages "
            "in it cannot be read", fix=_ENCODING_FIX)
    return codec


def undecodable(exc: UnicodeDecodeError, server_encoding: str) -> FatalSourceError:
    """The error for a message that is not text in the database's encoding."""
    fix = _ENCODING_FIX
    if server_encoding.upper() == "SQL_ASCII":
        fix = "a SQL_ASCII database is read as UTF-8: store its text as UTF-8, or " + fix
    return FatalSourceError(
        f"a wal2json message is not valid {exc.encoding} text (database encoding "
        f"{server_encoding}): {exc.reason} at byte {exc.start}", fix=fix)


def _now_pg_us() -> int:
    return int(time.time() * 1_000_000) - _PG_EPOCH_US


def _driver_error(message: bytes | str, result: pq.abc.PGresult | None) -> Exception:
    """The psycopg exception class for a libpq-level failure (by SQLSTATE when known)."""
    text = message.decode(errors="replace") if isinstance(message, bytes) else message
    sqlstate = result.error_field(pq.DiagnosticField.SQLSTATE) if result is not None else None
    if sqlstate:
        return psycopg.errors.lookup(sqlstate.decode())(text)
    return psycopg.OperationalError(text)


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def start_command(slot: str, position: Position | None, options: dict[str, str],
                  codec: str = "utf-8") -> bytes:
    """The command, in the database's encoding (add-tables names tables; a character the
    encoding lacks cannot be in a table name there, and is sent as "?")."""
    start = str(position) if isinstance(position, Lsn) else "0/0"
    opts = ", ".join(f"{quote_ident(k)} '{v.replace(chr(39), chr(39) * 2)}'"
                     for k, v in options.items())
    command = f"START_REPLICATION SLOT {quote_ident(slot)} LOGICAL {start} ({opts})"
    return command.encode(codec, errors="replace")


class PostgresLogReader:
    """A :class:`dblog.spi.LogReader` (and :class:`dblog.spi.WakeableLogReader`) over one
    replication connection."""

    def __init__(
        self,
        dsn: str,
        slot: str,
        decoder: Wal2JsonDecoder,
        add_tables: list[str] | None,
        verify_start: Callable[[Position | None], None],
    ) -> None:
        self.dsn = dsn
        self.slot = slot
        self.decoder = decoder
        self.options = dict(WAL2JSON_OPTIONS)
        if add_tables:
            self.options["add-tables"] = ",".join(add_tables)
        self.verify_start = verify_start
        self._conn: pq.abc.PGconn | None = None
        self._received = 0
        self._acked = 0
        self._last_feedback = 0.0
        self._wakeup = Wakeup()
        self._server_encoding = "UTF8"
        self._codec = "utf-8"

    def wakeup(self) -> None:
        self._wakeup.set()

    def start(self, position: Position | None) -> None:
        self.verify_start(position)
        try:
            self._start(position)
        except psycopg.Error as exc:
            raise classify(exc, "starting the replication stream") from exc

    def _start(self, position: Position | None) -> None:
        extra = {"replication": "database", "options": "-c datestyle=ISO -c timezone=UTC"}
        if "connect_timeout" not in conninfo_to_dict(self.dsn):  # libpq's connect blocks
            extra["connect_timeout"] = "10"
        conn = pq.PGconn.connect(make_conninfo(self.dsn, **extra).encode())  # URLs too
        if conn.status != pq.ConnStatus.OK:
            error = _driver_error(conn.get_error_message(), None)
            conn.finish()
            raise classify(error, "opening the replication connection")
        encoding = conn.parameter_status(b"server_encoding")
        self._server_encoding = encoding.decode() if encoding else "UTF8"
        try:
            self._codec = python_codec(self._server_encoding)
        except FatalSourceError:
            conn.finish()
            raise
        conn.send_query(start_command(self.slot, position, self.options, self._codec))
        result = conn.get_result()
        if result is None or result.status != pq.ExecStatus.COPY_BOTH:
            error = _driver_error(conn.get_error_message() or "no result", result)
            conn.finish()
            raise classify(error, f"START_REPLICATION on slot {self.slot}")
        self._conn = conn
        if isinstance(position, Lsn):
            self._acked = self._received = position.value

    def poll(self, timeout: float) -> list[LogItem]:
        try:
            return self._poll(timeout)
        except psycopg.Error as exc:  # libpq failed itself (connection lost, reset)
            raise classify(exc, "reading the replication stream") from exc
        except UnicodeDecodeError as exc:
            raise undecodable(exc, self._server_encoding) from exc

    def _poll(self, timeout: float) -> list[LogItem]:
        conn = self._require()
        payloads: list[str] = []
        lsns: list[int] = []
        deadline = time.monotonic() + timeout
        codec = self._codec  # decoded here: msgspec reads a str faster than a memoryview
        while len(payloads) < MAX_BATCH:
            nbytes, data = conn.get_copy_data(1)
            if nbytes == 0:
                if payloads:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                wake = self._wakeup.fileno()
                readable, _, _ = select.select([conn.socket, wake], [], [], remaining)
                if wake in readable and self._wakeup.clear():
                    break
                conn.consume_input()
                continue
            if nbytes < 0:
                raise self._stream_error()
            kind = data[0]
            if kind == 0x77:  # 'w': XLogData
                start = _LSN.unpack_from(data, 1)[0]
                lsns.append(start)
                payloads.append(str(data[25:], codec))
            elif kind == 0x6B and data[17]:  # 'k': keepalive asking for a reply
                self._send_feedback()
        if lsns:
            self._received = max(self._received, lsns[-1])
        self._maybe_feedback()
        return self.decoder.decode_batch(payloads, lsns) if payloads else []

    def _stream_error(self) -> Exception:
        conn = self._require()
        message = conn.get_error_message() or "the server ended the replication stream"
        return classify(_driver_error(message, conn.get_result()), "reading the replication stream")

    def acknowledge(self, position: Position) -> None:
        if isinstance(position, Lsn) and position.value > self._acked:
            self._acked = position.value
            try:
                self._send_feedback()
            except psycopg.Error as exc:
                raise classify(exc, "sending the standby status") from exc

    def _maybe_feedback(self) -> None:
        if time.monotonic() - self._last_feedback >= FEEDBACK_INTERVAL_S:
            self._send_feedback()

    def _send_feedback(self) -> None:
        conn = self._require()
        written = max(self._received, self._acked)
        message = _STATUS.pack(b"r", written, self._acked, self._acked, _now_pg_us(), 0)
        if conn.put_copy_data(message) != 1 or conn.flush() != 0:
            raise RetryableSourceError(f"sending standby status failed: {conn.get_error_message()}")
        self._last_feedback = time.monotonic()

    def _require(self) -> pq.abc.PGconn:
        if self._conn is None:
            raise RetryableSourceError("the replication stream is not started")
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.finish()
            self._conn = None
        self._wakeup.close()
