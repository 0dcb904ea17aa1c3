"""Driver errors of the SQL output, classified once by error code (dblog/errors.py).

Retryable: the target went away or is busy for now (connection lost or refused, the server
shutting down or starting, a deadlock or serialization failure, SQLite's lock), its disk is
full or failing (as for the Delta output's ENOSPC, EDQUOT, EIO), or it accepts no writes for
now (read-only: a standby during a failover): the engine retries the flush with backoff, and
the batch is planned again from the state before it; the message says what to check. Fatal:
everything else, in particular missing rights and a schema the replica cannot use; the
message names the fix where the code says what it is.

Errors come two ways: wrapped by SQLAlchemy (``DBAPIError.orig``), or raised by the driver
itself where the output calls it directly (PostgreSQL's COPY path uses psycopg's cursor).
Both are classified by the same code readers, from the driver error's code and never its
text, so a lock timeout is retried whichever call met it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import exc as sa_exc

from dblog.errors import DblogError, FatalOutputError, OutputError, RetryableOutputError

# PostgreSQL SQLSTATEs: class 08 (connection), admin/crash shutdown, cannot connect now,
# serialization failure, deadlock, too many connections, lock not available
_PG_RETRYABLE = {"57P01", "57P02", "57P03", "40001", "40P01", "53300", "55P03"}
_PG_RIGHTS = {"42501", "28000", "28P01"}
_PG_DISK = {"53100", "58030"}  # disk full, I/O error
_PG_READ_ONLY = {"25006"}  # read-only SQL transaction (a hot standby, read-only default)
_PG_NO_DATABASE = "3D000"  # invalid catalog name: the url's database does not exist
# MySQL/MariaDB error numbers: can't connect (2002, 2003), server gone (2006), lost (2013,
# 2055), shutdown in progress (1053), too many connections (1040), lock wait timeout (1205),
# deadlock (1213), connection killed (1927), client idle timeout (4031)
_MY_RETRYABLE = {2002, 2003, 2006, 2013, 2055, 1053, 1040, 1205, 1213, 1927, 4031}
_MY_RIGHTS = {1044, 1045, 1142, 1143, 1227, 1370}
_MY_DISK = {1021, 1114}  # disk full, the table is full
_MY_READ_ONLY = {1290, 1792}  # running with --read-only, a READ ONLY transaction
_MY_NO_DATABASE = 1049  # unknown database (SQLite has no such code: it creates the file)
_SQLITE_RETRYABLE = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}
_SQLITE_DISK = {sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR}

_RIGHTS_FIX = ("grant the output's user the rights to create tables and views and to select, "
               "insert, update and delete in the target schema")
_DISK = ("the target's disk is full or failing (retried meanwhile): free space on the "
         "target's disk")
_READ_ONLY = ("the target accepts no writes, it is read-only (retried meanwhile: a standby "
              "during a failover): point the sql output's url at the primary")

_DATABASE_FIX = ("the database named in the sql output's url does not exist: create it, or "
                 "correct the database name at the end of the url")
REACH_FIX = ("check the sql output's url (host, port, database name, user, password) and that "
             "the target server runs and accepts connections from this host")

RIGHTS, DISK, READ_ONLY, NO_DATABASE = "rights", "disk", "read-only", "no-database"
"""What a code says (besides retryable or fatal), for the message."""

Verdict = tuple[bool | None, str | None, str | None]
"""(retryable, fatal or unknown; the code as text; RIGHTS, DISK, READ_ONLY, NO_DATABASE or
None)."""


def _pg(orig: BaseException) -> Verdict:
    import psycopg

    if not isinstance(orig, psycopg.Error):
        return None, None, None
    state = orig.sqlstate
    if state is None:  # no server answer: the connection failed, or a client-side error
        return isinstance(orig, psycopg.OperationalError | psycopg.InterfaceError), None, None
    if state.startswith("08") or state in _PG_RETRYABLE:
        return True, state, None
    if state == _PG_NO_DATABASE:
        return False, state, NO_DATABASE
    return _known(state, state in _PG_RIGHTS, state in _PG_DISK, state in _PG_READ_ONLY)


def _known(code: str, rights: bool, disk: bool, read_only: bool) -> Verdict:
    if rights:
        return False, code, RIGHTS
    if disk or read_only:
        return True, code, DISK if disk else READ_ONLY
    return None, code, None


def _mysql(orig: BaseException) -> Verdict:
    args = orig.args
    code = args[0] if args and isinstance(args[0], int) else None
    if code is None:
        return None, None, None
    if code in _MY_RETRYABLE:
        return True, str(code), None
    if code == _MY_NO_DATABASE:
        return False, str(code), NO_DATABASE
    return _known(str(code), code in _MY_RIGHTS, code in _MY_DISK, code in _MY_READ_ONLY)


def _sqlite(orig: BaseException) -> Verdict:
    code = orig.sqlite_errorcode if isinstance(orig, sqlite3.Error) else None
    if code is None:
        return None, None, None
    if code & 0xFF in _SQLITE_RETRYABLE:
        return True, str(code), None
    return _known(str(code), False, code & 0xFF in _SQLITE_DISK, False)


def driver_errors(dialect: str) -> tuple[type[BaseException], ...]:
    """The base classes of the errors ``dialect``'s driver raises (imported only when
    asked: a target's driver need not be installed for the others)."""
    if dialect == "sqlite":
        return (sqlite3.Error,)
    if dialect == "postgresql":
        import psycopg

        return (psycopg.Error,)
    import MySQLdb

    return (MySQLdb.Error,)


def classify(exc: sa_exc.SQLAlchemyError, dialect: str, what: str) -> OutputError:
    """The one classification of a SQLAlchemy error: retryable, or fatal with a fix."""
    if isinstance(exc, sa_exc.TimeoutError):  # the pool had no connection in time
        return RetryableOutputError(f"{what}: {exc}")
    orig = exc.orig if isinstance(exc, sa_exc.DBAPIError) else None
    if orig is None:
        return FatalOutputError(f"{what}: {exc}")
    invalidated = isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated
    return classify_driver(orig, dialect, what, invalidated)


def classify_driver(orig: BaseException, dialect: str, what: str,
                    invalidated: bool = False) -> OutputError:
    """A driver's own error (``invalidated``: SQLAlchemy saw its connection lost), by code."""
    reader = {"postgresql": _pg, "sqlite": _sqlite}.get(dialect, _mysql)
    verdict, code, what_code = reader(orig)
    if invalidated:
        verdict = True
    text = f"{what}: {str(orig).strip()}" + (f" (code {code})" if code else "")
    if what_code in (DISK, READ_ONLY):
        text += "; " + (_DISK if what_code == DISK else _READ_ONLY)
    if verdict:
        return RetryableOutputError(text)
    return FatalOutputError(text, fix={RIGHTS: _RIGHTS_FIX, NO_DATABASE: _DATABASE_FIX}.get(
        what_code or ""))


@contextmanager
def translated(dialect: str, what: str) -> Iterator[None]:
    """Raise SQLAlchemy and driver errors inside the block as classified
    :class:`OutputError`; anything else passes unchanged."""
    try:
        yield
    except DblogError:
        raise
    except sa_exc.SQLAlchemyError as exc:
        raise classify(exc, dialect, what) from exc
    except Exception as exc:
        if not isinstance(exc, driver_errors(dialect)):
            raise
        raise classify_driver(exc, dialect, what) from exc
