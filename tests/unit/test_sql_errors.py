"""Driver errors of the SQL output are classified by code whichever way they are raised:
wrapped by SQLAlchemy, or by the driver itself (the PostgreSQL COPY path calls psycopg's
cursor directly, so a lock timeout there must not escape as a raw psycopg error)."""

from __future__ import annotations

import sqlite3

import MySQLdb
import psycopg
import pytest

from dblog.errors import FatalOutputError, OutputError, RetryableOutputError
from dblog.outputs.sql_errors import translated


def _raised(dialect: str, error: BaseException) -> OutputError:
    with pytest.raises(OutputError) as caught, translated(dialect, "flushing t"):
        raise error
    return caught.value


@pytest.mark.parametrize("error", [psycopg.errors.LockNotAvailable("lock timeout"),
                                   psycopg.errors.DeadlockDetected("deadlock"),
                                   psycopg.errors.SerializationFailure("serialization"),
                                   psycopg.OperationalError("connection refused")])
def test_raw_psycopg_errors_that_pass_are_retried(error: psycopg.Error) -> None:
    assert isinstance(_raised("postgresql", error), RetryableOutputError)


def test_a_raw_psycopg_error_keeps_its_code_and_other_codes_stop() -> None:
    retried = _raised("postgresql", psycopg.errors.LockNotAvailable("lock timeout"))
    assert "55P03" in str(retried)
    denied = _raised("postgresql", psycopg.errors.InsufficientPrivilege("denied"))
    assert isinstance(denied, FatalOutputError) and denied.fix is not None
    assert isinstance(_raised("postgresql", psycopg.errors.UniqueViolation("dup")),
                      FatalOutputError)


def test_a_client_side_psycopg_error_is_not_retried_forever() -> None:
    """No SQLSTATE and not a connection error: e.g. a value COPY cannot adapt."""
    assert isinstance(_raised("postgresql", psycopg.ProgrammingError("cannot adapt")),
                      FatalOutputError)


def test_raw_sqlite_and_mysql_errors_are_classified_by_code() -> None:
    busy = sqlite3.OperationalError("database is locked")
    busy.sqlite_errorcode = sqlite3.SQLITE_BUSY
    assert isinstance(_raised("sqlite", busy), RetryableOutputError)
    assert isinstance(_raised("mysql", MySQLdb.OperationalError(1213, "Deadlock found")),
                      RetryableOutputError)
    assert isinstance(_raised("mariadb", MySQLdb.ProgrammingError(1146, "no table")),
                      FatalOutputError)


def test_other_exceptions_pass_unchanged() -> None:
    with pytest.raises(KeyError), translated("postgresql", "flushing t"):
        raise KeyError("x")


def _sqlite_full() -> sqlite3.OperationalError:
    """SQLite's own SQLITE_FULL: a database that may not grow past two pages."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("PRAGMA max_page_count = 2")
        conn.execute("CREATE TABLE t (x TEXT)")
        conn.executemany("INSERT INTO t VALUES (?)", [("x" * 1000,)] * 100)
    except sqlite3.OperationalError as exc:
        return exc
    finally:
        conn.close()
    raise AssertionError("SQLite did not fill up")


@pytest.mark.parametrize("dialect, error, code", [
    ("postgresql", psycopg.errors.DiskFull("could not extend file"), "53100"),
    ("postgresql", psycopg.errors.IoError("could not write block"), "58030"),
    ("mysql", MySQLdb.OperationalError(1021, "Disk full (/var/lib/mysql)"), "1021"),
    ("mariadb", MySQLdb.OperationalError(1114, "The table 'b' is full"), "1114"),
    ("sqlite", _sqlite_full(), "13"),
])
def test_a_full_disk_is_retried_like_the_delta_outputs(dialect: str, error: BaseException,
                                                        code: str) -> None:
    """A full or failing disk on the target is retryable (the Delta output's ENOSPC, EDQUOT,
    EIO): before, each of these stopped the pipeline as fatal."""
    raised = _raised(dialect, error)
    assert isinstance(raised, RetryableOutputError)
    assert f"(code {code})" in str(raised) and "disk" in str(raised)


@pytest.mark.parametrize("dialect, error, code", [
    ("postgresql", psycopg.errors.ReadOnlySqlTransaction("read-only transaction"), "25006"),
    ("mysql", MySQLdb.OperationalError(1290, "running with the --read-only option"), "1290"),
    ("mariadb", MySQLdb.OperationalError(1792, "Cannot execute in a READ ONLY transaction"),
     "1792"),
])
def test_a_read_only_target_is_retried(dialect: str, error: BaseException, code: str) -> None:
    """A target that accepts no writes for now (a standby during a failover, a primary set
    read-only for maintenance) is retried, naming what to check: before, fatal."""
    raised = _raised(dialect, error)
    assert isinstance(raised, RetryableOutputError)
    assert f"(code {code})" in str(raised) and "read-only" in str(raised)


@pytest.mark.parametrize("dialect,error,code", [
    ("postgresql", psycopg.errors.InvalidCatalogName('database "nope" does not exist'), "3D000"),
    ("mysql", MySQLdb.OperationalError(1049, "Unknown database 'nope'"), "1049"),
    ("mariadb", MySQLdb.OperationalError(1049, "Unknown database 'nope'"), "1049"),
])
def test_an_unknown_database_stops_with_the_url_fix(dialect: str, error: BaseException,
                                                     code: str) -> None:
    """A wrong database name in the url: not retried, and the fix says which part to change."""
    stopped = _raised(dialect, error)
    assert isinstance(stopped, FatalOutputError) and code in stopped.message
    assert stopped.fix is not None and "database" in stopped.fix and "url" in stopped.fix


def test_a_check_of_a_target_that_cannot_be_reached_names_the_url_once() -> None:
    """check's finding said 'sql:URL: checking sql:URL: ...' and 'make the target reachable'
    whatever the url's mistake (for PostgreSQL a wrong database name at connect time has no
    SQLSTATE, so it cannot be told apart from a refused connection)."""
    from dblog.outputs.sql import SqlOutput

    output = SqlOutput({"url": "postgresql+psycopg://dblog@127.0.0.1:1/app"})
    [finding] = output.check()
    assert finding.level == "error"
    assert finding.message.count("127.0.0.1:1/app") == 1, finding.message
    assert finding.fix is not None and "url" in finding.fix and "port" in finding.fix
