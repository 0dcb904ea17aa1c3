"""psycopg errors classified once into dblog's error tree.

By SQLSTATE whenever the error carries one; the message text is read only when it does not
(libpq's connect-time failures: the server's rejection reaches the client as text only).
"""

from __future__ import annotations

import psycopg
from psycopg import errors as pgerrors

from dblog.errors import (
    DblogError,
    DumpRequestError,
    FatalSourceError,
    RetryableSourceError,
    TableChanged,
)

_FATAL = (
    pgerrors.InsufficientPrivilege,
    pgerrors.InvalidPassword,
    pgerrors.InvalidAuthorizationSpecification,
    pgerrors.ObjectNotInPrerequisiteState,
    pgerrors.UndefinedObject,
    pgerrors.FeatureNotSupported,
)


DSN_FIX = ("write key=value pairs separated by spaces (a value that holds spaces or quotes goes "
           "in single quotes) or a postgresql:// URL")
LOGIN_FIX = "check source.dsn (host, user, password, dbname) and pg_hba.conf"
REACH_FIX = ("check that the server runs and that source.dsn's host and port point at it (a "
             "firewall, or listen_addresses in postgresql.conf, may also block it); dblog run "
             "retries, dblog check reports it at once")
PLUGIN_FIX = "install it on the database host (Debian: apt-get install postgresql-15-wal2json)"
# connection exceptions (08), operator intervention (57: shutdown, starting up), insufficient
# resources (53: too many connections), transaction rollback (40: serialization, deadlock)
_RETRYABLE_CLASSES = ("08", "57", "53", "40")


def classify(exc: BaseException, doing: str) -> DblogError:
    """The dblog error for a driver error raised while ``doing`` something."""
    text = str(exc).strip()
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate:
        return _by_sqlstate(exc, str(sqlstate), doing, text)
    return _by_text(exc, doing, text)

WAL_GONE_FIX = ("the server removed WAL the replication slot still needed (max_slot_wal_keep_size "
                "or a damaged slot): drop the slot, remove the pipeline's state and start over "
                "with a full dump")


def _by_sqlstate(exc: BaseException, sqlstate: str, doing: str, text: str) -> DblogError:
    message = f"{doing}: {text}"
    if sqlstate.startswith("28") or sqlstate == "3D000":  # authorization; unknown database
        return FatalSourceError(message, fix=LOGIN_FIX)
    if sqlstate == "42P01":  # undefined table
        return DumpRequestError(message)
    if sqlstate == "42703":  # undefined column: DDL while the table's queries were cached
        return TableChanged(message)
    if sqlstate == "58P01" and "wal2json" in text:  # undefined file: the plugin's library
        return FatalSourceError(
            f"{doing}: the wal2json output plugin is not installed on the server ({text})",
            fix=PLUGIN_FIX)
    if sqlstate == "58P01" and "WAL segment" in text:  # the slot's WAL is gone for good
        return FatalSourceError(message, fix=WAL_GONE_FIX)
    if sqlstate.startswith("08"):  # connection exception
        return RetryableSourceError(message, fix=REACH_FIX)
    if sqlstate[:2] in _RETRYABLE_CLASSES:
        return RetryableSourceError(message)
    if isinstance(exc, _FATAL):
        return FatalSourceError(message)
    if isinstance(exc, psycopg.OperationalError):
        return RetryableSourceError(message)
    return FatalSourceError(message)


def _by_text(exc: BaseException, doing: str, text: str) -> DblogError:
    """No SQLSTATE: libpq's own messages (English in this process) and the server's English
    rejection texts are recognised; any other failure to connect is retried (a server whose
    lc_messages is not English rejects a bad password in words this cannot read)."""
    if isinstance(exc, psycopg.ProgrammingError) and "connection info string" in text:
        # libpq quotes the part of the string it could not parse: maybe the password
        return FatalSourceError(f"{doing}: source.dsn is not a valid libpq connection string",
                                fix=DSN_FIX)
    if "could not access file" in text and ("wal2json" in text or "plugin" in text):
        return FatalSourceError(
            f"{doing}: the wal2json output plugin is not installed on the server ({text})",
            fix=PLUGIN_FIX)
    if "password authentication failed" in text or "no pg_hba.conf entry" in text or (
            "does not exist" in text and ("role" in text or "database" in text)):
        return FatalSourceError(f"{doing}: {text}", fix=LOGIN_FIX)
    if isinstance(exc, _FATAL):
        return FatalSourceError(f"{doing}: {text}")
    if isinstance(exc, psycopg.OperationalError):  # libpq could not reach the server
        return RetryableSourceError(f"{doing}: {text}", fix=REACH_FIX)
    return FatalSourceError(f"{doing}: {text}")
