"""psycopg errors classified once into dblog's error tree."""

from __future__ import annotations

import psycopg
from psycopg import errors as pgerrors

from dblog.errors import DblogError, DumpRequestError, FatalSourceError, RetryableSourceError

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


def classify(exc: BaseException, doing: str) -> DblogError:
    """The dblog error for a driver error raised while ``doing`` something."""
    text = str(exc).strip()
    if isinstance(exc, psycopg.ProgrammingError) and "connection info string" in text:
        # libpq quotes the part of the string it could not parse: maybe the password
        return FatalSourceError(f"{doing}: source.dsn is not a valid libpq connection string",
                                fix=DSN_FIX)
    if "could not access file" in text and ("wal2json" in text or "plugin" in text):
        return FatalSourceError(
            f"{doing}: the wal2json output plugin is not installed on the server ({text})",
            fix="install it on the database host (Debian: apt-get install postgresql-15-wal2json)",
        )
    if "password authentication failed" in text or "no pg_hba.conf entry" in text or (
            "does not exist" in text and ("role" in text or "database" in text)):
        return FatalSourceError(f"{doing}: {text}",
                                fix="check source.dsn (host, user, password, dbname) and "
                                    "pg_hba.conf")
    if isinstance(exc, pgerrors.UndefinedTable):
        return DumpRequestError(f"{doing}: {text}")
    if isinstance(exc, _FATAL):
        return FatalSourceError(f"{doing}: {text}")
    if isinstance(exc, psycopg.OperationalError):
        return RetryableSourceError(f"{doing}: {text}")
    return FatalSourceError(f"{doing}: {text}")
