"""The one error tree of dblog.

::

    DblogError
    ├── ConfigError            invalid configuration; the message names the field and the fix
    ├── DumpRequestError       bad dump request (unknown table, no primary key, malformed key)
    │   ├── DumpIdConflict     the request's dump_id already names a dump of something else
    │   └── TableChanged       a chunk query named a column the table no longer has (DDL while
    │                          dumping): the table's metadata is read again and the chunk retried
    ├── SourceError            the source database
    │   ├── RetryableSourceError   connection lost, server restarting: retried with backoff
    │   └── FatalSourceError       settings, rights, missing plugin: stops with the fix spelled out
    ├── OutputError            an output could not deliver
    │   ├── RetryableOutputError
    │   └── FatalOutputError
    └── StateError             the state store
        ├── RetryableStateError    the store is unreachable for now (ZooKeeper connection loss)
        └── FencedError        a compare-and-set write lost: a newer leader epoch owns the state
            └── LeadershipLost the instance lost leadership and stopped emitting

Driver errors are classified once, in each adapter (``connectors/*``, ``outputs/*``), into
the retryable or fatal branch; the core only looks at :attr:`DblogError.retryable`. Every
message and fix passes :func:`dblog.runtime.redact.redact` when the error is built, so no
password reaches a message, a log line or the state through an error.
"""

from __future__ import annotations

from dblog.runtime.redact import redact


class DblogError(Exception):
    """Base of every error dblog raises on purpose."""

    retryable: bool = False

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        # masked where it is raised: a driver's message may quote a connection string
        message = redact(str(message))
        fix = None if fix is None else redact(str(fix))
        self.message = message
        self.fix = fix
        super().__init__(f"{message}\n  fix: {fix}" if fix else message)


class ConfigError(DblogError):
    """The configuration is invalid."""


class DumpRequestError(DblogError):
    """A dump request cannot be served as asked; nothing else is affected."""


class DumpIdConflict(DumpRequestError):
    """A request's ``dump_id`` already names a dump that reads something else."""

    def __init__(self, dump_id: str, asked: str) -> None:
        super().__init__(f"dump id {dump_id!r} already names another dump: {asked}",
                         fix="give this dump a new dump_id, or repeat the first request "
                             "exactly to get its dump")


class TableChanged(DumpRequestError):
    """A dump query named a column (or table) the source no longer has: a DDL ran while the
    table was being dumped. Adapters classify the driver's "undefined column" error code into
    it; the scheduler reads the table's metadata again and retries the chunk."""


class SourceError(DblogError):
    """The source database failed."""


class RetryableSourceError(SourceError):
    retryable = True


class FatalSourceError(SourceError):
    """Unsupported configuration or missing rights on the source."""


class OutputError(DblogError):
    """An output failed to deliver."""


class RetryableOutputError(OutputError):
    retryable = True


class FatalOutputError(OutputError):
    pass


class StateError(DblogError):
    """The state store failed."""


class RetryableStateError(StateError):
    retryable = True


class FencedError(StateError):
    """A state write was rejected because a newer leader epoch owns the state."""


class LeadershipLost(FencedError):
    """This instance is no longer (or may no longer be) the leader: it emits and writes nothing."""
