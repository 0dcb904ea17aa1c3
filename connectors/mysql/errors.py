"""Driver errors (mysqlclient, PyMySQL, mysql-replication) classified once into dblog's tree."""

from __future__ import annotations

from collections.abc import Sequence

import pymysql
from pymysqlreplication import exceptions as replication

from dblog.errors import (
    DblogError,
    DumpRequestError,
    FatalSourceError,
    RetryableSourceError,
    TableChanged,
)

# connection lost or refused, server going away or shutting down, connection killed,
# deadlock and lock wait timeout, query interrupted
RETRYABLE_CODES = frozenset({2002, 2003, 2006, 2013, 2055, 1040, 1053, 1077, 1152, 1158,
                             1159, 1160, 1161, 1205, 1213, 1317, 1927, 4031})
_UNREACHABLE = frozenset({2002, 2003})  # no server at the socket / host and port
REACH_FIX = ("check that the server runs and that source.dsn's host and port point at it (a "
             "firewall or the server's bind_address may also block it); dblog run retries, "
             "dblog check reports it at once")
_AUTH = frozenset({1044, 1045, 1049, 1698})
_RIGHTS = frozenset({1142, 1143, 1227, 1370})


class StreamLost(Exception):
    """The binlog connection dropped (raised by the adapter's connection wrapper instead of
    letting mysql-replication reconnect on its own from a position it cannot know is safe)."""


DRIVER_ERRORS = (pymysql.err.Error, StreamLost, OSError, replication.BinLogNotEnabled,
                 replication.TableMetadataUnavailableError, replication.MalformedBinLogEvent,
                 replication.StatusVariableMismatch)
"""What the driver and mysql-replication raise; anything else is a bug and escapes as itself."""


def error_code(exc: BaseException) -> int | None:
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def classify(exc: BaseException, doing: str) -> DblogError:
    """The dblog error for a driver error raised while ``doing`` something."""
    if isinstance(exc, DblogError):
        return exc
    code = error_code(exc)
    text = str(exc.args[1]) if code is not None and len(exc.args) > 1 else str(exc)
    if not isinstance(exc, DRIVER_ERRORS):
        text = f"{type(exc).__name__}: {text}".rstrip(": ")
    if code in _UNREACHABLE or isinstance(exc, ConnectionRefusedError):
        return RetryableSourceError(f"{doing}: {text}", fix=REACH_FIX)
    if isinstance(exc, (StreamLost, ConnectionError, TimeoutError)) or code in RETRYABLE_CODES:
        return RetryableSourceError(f"{doing}: {text}")
    if code in _AUTH:
        return FatalSourceError(f"{doing}: {text}",
                                fix="check source.dsn (host, port, user, password, database) "
                                    "and the user's host grants")
    if code in _RIGHTS:
        return FatalSourceError(f"{doing}: {text}",
                                fix="GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT (MariaDB: "
                                    "BINLOG MONITOR) ON *.* TO <dblog user>; see "
                                    "docs/sources/mysql.md")
    if code == 1054:  # unknown column: dropped or renamed since the reader read the table
        return TableChanged(f"{doing}: {text}")
    if code == 1146:
        return DumpRequestError(f"{doing}: {text}", fix="check the table name (database.table)")
    if code == 1236:
        return _binlog_error(doing, text)
    return FatalSourceError(f"{doing}: {text}")


def decode_error(exc: Exception, table: object, text_columns: Sequence[str]
                 ) -> FatalSourceError:
    """The one error for a row image that does not decode (the fast path's and
    mysql-replication's): the table, and the text column (or the text columns, one of which)
    whose stored bytes are not valid in its charset."""
    names = ", ".join(repr(name) for name in text_columns)
    which = f"column {names}" if len(text_columns) == 1 else f"one of the columns {names}"
    return FatalSourceError(
        f"a row event of {table} does not decode: {which}: {type(exc).__name__}: {exc}",
        fix=f"correct the stored value (valid text in the column's charset), or leave {table} "
            "out of source.tables; the binlog keeps the event, so then remove the state and "
            "request a full dump")


def _binlog_error(doing: str, text: str) -> DblogError:
    lowered = text.lower()
    if "server_id" in lowered or "server-id" in lowered or "same server" in lowered:
        return FatalSourceError(f"{doing}: {text}",
                                fix="give this pipeline a source.server_id that no replica or "
                                    "other pipeline of this server uses")
    return FatalSourceError(
        f"{doing}: the server cannot send the binlog from the committed position ({text})",
        fix="the binlog was purged past the committed position (raise binlog_expire_logs_seconds "
            "/ expire_logs_days); remove the state and request a full dump to start over")
