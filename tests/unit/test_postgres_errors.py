"""connectors/postgres/errors.classify: driver errors classified by SQLSTATE first; the message
text is read only when there is no SQLSTATE (libpq's connect-time failures)."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors as pgerrors

from dblog.connectors.postgres.errors import classify
from dblog.errors import (
    DblogError,
    DumpRequestError,
    FatalSourceError,
    RetryableSourceError,
    TableChanged,
)


def _kind(exc: BaseException) -> DblogError:
    return classify(exc, "reading a chunk of public.t")


def test_undefined_table_named_like_role_is_a_dump_request_error() -> None:
    error = _kind(pgerrors.UndefinedTable('relation "public.user_roles" does not exist'))
    assert type(error) is DumpRequestError
    assert "check source.dsn" not in str(error)
    assert 'relation "public.user_roles" does not exist' in error.message


def test_undefined_column_is_table_changed() -> None:
    for text in ('column "database_id" does not exist', 'column "role" does not exist',
                 'column "v" does not exist'):
        error = _kind(pgerrors.UndefinedColumn(text))
        assert isinstance(error, TableChanged), (text, repr(error))
        assert not error.retryable
        assert "check source.dsn" not in str(error)
        assert text in error.message


@pytest.mark.parametrize("exc", [
    pgerrors.InvalidPassword("Passwort-Authentifizierung für Benutzer »dblog« fehlgeschlagen"),
    pgerrors.InvalidAuthorizationSpecification("kein pg_hba.conf-Eintrag"),
    pgerrors.InvalidCatalogName("la base de données « x » n'existe pas"),
])
def test_auth_and_unknown_database_codes_are_fatal_with_the_dsn_fix(exc: Exception) -> None:
    error = _kind(exc)
    assert type(error) is FatalSourceError
    assert error.fix is not None and "source.dsn" in error.fix and "pg_hba.conf" in error.fix


@pytest.mark.parametrize("exc", [
    pgerrors.AdminShutdown("terminating connection due to administrator command"),
    pgerrors.CannotConnectNow("the database system is starting up"),
    pgerrors.ConnectionFailure("role database does not exist"),  # text must not matter
    pgerrors.lookup("08006")("connection failure"),
])
def test_connection_and_shutdown_codes_are_retryable(exc: Exception) -> None:
    assert type(_kind(exc)) is RetryableSourceError


@pytest.mark.parametrize("exc", [
    pgerrors.InsufficientPrivilege("permission denied for table t"),
    pgerrors.ObjectNotInPrerequisiteState('replication slot "s" is not active'),
    pgerrors.FeatureNotSupported("not supported"),
])
def test_rights_and_state_codes_stay_fatal_without_the_dsn_fix(exc: Exception) -> None:
    error = _kind(exc)
    assert type(error) is FatalSourceError
    assert error.fix is None or "source.dsn" not in error.fix


def test_missing_plugin_code_names_the_install_fix() -> None:
    error = _kind(pgerrors.UndefinedFile('could not access file "wal2json": No such file'))
    assert type(error) is FatalSourceError
    assert error.fix is not None and "apt-get install postgresql" in error.fix


def test_other_missing_files_are_not_called_a_missing_plugin() -> None:
    gone = _kind(pgerrors.UndefinedFile(
        "requested WAL segment 000000010000000000000003 has already been removed"))
    assert type(gone) is FatalSourceError and "wal2json" not in gone.message
    assert gone.fix is not None and "full dump" in gone.fix
    other = _kind(pgerrors.UndefinedFile('could not open file "pg_logical/snapshots/0-1.snap"'))
    assert "wal2json" not in other.message
    assert other.fix is None or "apt-get" not in other.fix


def test_connect_time_errors_without_sqlstate_use_the_text() -> None:
    refused = psycopg.OperationalError(
        'connection failed: connection to server at "127.0.0.1", port 1 failed: '
        "Connection refused")
    assert refused.sqlstate is None
    assert type(_kind(refused)) is RetryableSourceError
    for text in ('FATAL:  database "nope" does not exist', 'FATAL:  role "x" does not exist',
                 'FATAL:  password authentication failed for user "x"',
                 'FATAL:  no pg_hba.conf entry for host "1.2.3.4"'):
        error = _kind(psycopg.OperationalError(f"connection failed: ...: {text}"))
        assert type(error) is FatalSourceError, text
        assert error.fix is not None and "source.dsn" in error.fix
    bad = _kind(psycopg.ProgrammingError('missing "=" after "x" in connection info string'))
    assert type(bad) is FatalSourceError and "not a valid libpq connection string" in bad.message


@pytest.mark.parametrize("exc", [
    psycopg.OperationalError('connection failed: connection to server at "127.0.0.1", port 1 '
                             "failed: Connection refused"),
    psycopg.OperationalError("connection failed: Verbindungsaufbau abgelehnt"),  # any language
    pgerrors.lookup("08006")("connection failure"),
])
def test_a_server_that_cannot_be_reached_is_retried_with_the_host_and_port_fix(
        exc: Exception) -> None:
    """A wrong port (refused) gave no fix line while a wrong database name did."""
    error = _kind(exc)
    assert type(error) is RetryableSourceError
    assert error.fix is not None and "source.dsn" in error.fix and "port" in error.fix
