"""One Delta table as Spark addresses it (path-based or in a catalog), its log read through
delta-spark's ``DeltaLog``, and every commit to it fenced on the leader epoch.

The layout and the fence are the ``delta`` output's (:mod:`dblog.outputs.delta_table`): table
properties ``dblog.key`` and ``dblog.epoch``, and an application transaction ``dblog:<pipeline>``
with version ``epoch << 40 | n`` in every commit. delta-spark writes that transaction when the
session sets ``spark.databricks.delta.write.txnAppId``/``txnVersion`` (MERGE, DELETE and
DataFrame writes honour them), and it *skips* a command whose version is not above the
stored one: a MERGE then returns no metrics row. How a deposed leader is refused:

1. the log is read when the fence first meets a table in a run (and after each DELETE); a
   newer epoch there (property or transaction) raises :class:`~dblog.errors.LeadershipLost`;
2. every commit's version is above this epoch's last one in the table, and any newer epoch's
   is above all of this epoch's, so a skip can only mean that a newer epoch committed: a
   skipped MERGE raises LeadershipLost;
3. a new leader *claims* each table when it opens: a metadata change (``dblog.epoch``), which
   fails every commit prepared before it (Delta's optimistic concurrency: the deposed leader's
   commit gets a concurrent modification error, and its retry is skipped, rule 2), then an
   empty append that records its transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from dblog.errors import DblogError, FatalOutputError, LeadershipLost, RetryableOutputError

from .delta_table import EPOCH_PROPERTY, EPOCH_SHIFT, KEY_PROPERTY, app_id
from .spark_session import jvm

if TYPE_CHECKING:
    from pyspark.sql import Row, SparkSession
    from pyspark.sql.types import StructType

T = TypeVar("T")
TXN_APP = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
_LOW = (1 << EPOCH_SHIFT) - 1
_CONCURRENT = ("ConcurrentModification", "ConcurrentAppend", "ConcurrentDelete",
               "ConcurrentTransaction", "MetadataChanged", "ProtocolChanged",
               "ConcurrentWrite", "DELTA_CONCURRENT")
_TRANSIENT = ("java.io.IOException", "FileNotFoundException", "No space left",
              "Connection refused", "SocketTimeout")
RETRIABLE_KAFKA = "org.apache.kafka.common.errors.RetriableException"
_DEPTH = 32


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def classify(exc: BaseException, what: str) -> DblogError:
    """Spark and delta-spark errors, once: a lost commit race, a failing file system or a
    Kafka error its client calls retriable (:func:`retriable_kafka`) is retryable (the
    retry's epoch check refuses a deposed leader); anything else (a schema mismatch, a missing
    table, an unknown option) is fatal."""
    if isinstance(exc, DblogError):
        return exc
    kafka = retriable_kafka(exc)
    if kafka is not None:
        return RetryableOutputError(f"{what}: Kafka is not available for now: {kafka}")
    text = f"{type(exc).__name__}: {exc}"
    first = text.splitlines()[0][:600]
    if any(mark in text for mark in _CONCURRENT):
        return RetryableOutputError(f"{what}: a concurrent Delta commit won: {first}")
    if any(mark in text for mark in _TRANSIENT):
        return RetryableOutputError(f"{what}: {first}")
    return FatalOutputError(f"{what}: {first}")


def java_causes(exc: BaseException) -> Iterator[Any]:
    """The Java throwable behind a py4j error (``java_exception``) or a PySpark one
    (``_origin``), then its causes: Spark wraps a task's failure in a ``SparkException``
    whose cause is the task's exception."""
    throwable = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    for _ in range(_DEPTH):  # Throwable.getCause() answers null for a self-cause; bound anyway
        if throwable is None:
            return
        yield throwable
        throwable = throwable.getCause()


def class_names(throwable: Any) -> Iterator[str]:
    """The names of a Java object's class and of its superclasses."""
    klass = throwable.getClass()
    while klass is not None:
        yield str(klass.getName())
        klass = klass.getSuperclass()


def retriable_kafka(exc: BaseException) -> str | None:
    """``class: message`` of the first Kafka ``RetriableException`` in the Java cause chain of
    ``exc`` (None: there is none). Kafka's clients mark every transient error (a broker down,
    metadata late, a leader moving: ``TimeoutException``, ``NotLeaderOrFollowerException``...)
    by that superclass, so the type decides, never the message; the Spark Kafka sink resends a
    failed flush's records in order (at-least-once), so a retry is safe."""
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]

    try:
        for throwable in java_causes(exc):
            if RETRIABLE_KAFKA in class_names(throwable):
                return f"{throwable.getClass().getName()}: {throwable.getMessage()}"
    except Py4JError:  # a JVM gone away tells no type: the other rules decide
        return None
    return None


@dataclass(frozen=True)
class Snapshot:
    """What the fence and the layout checks read from a table's log."""

    version: int
    """-1: no table there."""
    txn: int | None
    key: str | None
    epoch: int | None
    schema_json: str | None

    def newest_epoch(self) -> int:
        txn = -1 if self.txn is None else self.txn >> EPOCH_SHIFT
        return max(txn, -1 if self.epoch is None else self.epoch)

    def schema(self) -> StructType | None:
        from pyspark.sql.types import StructType

        return None if self.schema_json is None else \
            StructType.fromJson(json.loads(self.schema_json))


def newest_txn(log: Any, version: int, app: str) -> int | None:
    """``app``'s transaction version as the commit file of ``version`` (the snapshot's newest
    commit) records it; None when that commit holds none for ``app`` (or is not a file of the
    log). Where it holds one, it is what ``snapshot.transactions()`` answers: the log replay
    keeps the last ``txn`` action per app id, and no commit of the snapshot comes after this
    one. Reading the one JSON file (a listing and a read through the table's LogStore) spares
    the state reconstruction ``transactions()`` runs as a Spark job after every new commit."""
    changes = log.getChanges(version, False)
    if not changes.hasNext():
        return None
    commit = changes.next()
    if int(commit._1()) != version:
        return None
    actions = commit._2()
    for i in range(actions.size()):
        action = actions.apply(i)
        if action.getClass().getSimpleName() == "SetTransaction" and action.appId() == app:
            return int(action.version())
    return None


class SparkDeltaTable:
    """A Delta table: ``ident`` in SQL, ``location`` for its log."""

    def __init__(self, spark: SparkSession, ident: str, location: str) -> None:
        self.spark, self.ident, self.location = spark, ident, location

    @classmethod
    def at_path(cls, spark: SparkSession, path: str) -> SparkDeltaTable:
        return cls(spark, f"delta.{quote(path)}", path)

    @classmethod
    def in_catalog(cls, spark: SparkSession, database: str, name: str) -> SparkDeltaTable:
        """A catalog table (its location resolved once, when it exists)."""
        ident = f"{quote(database)}.{quote(name)}"
        location = ""
        if spark.catalog.tableExists(name, database):
            detail = spark.sql(f"DESCRIBE DETAIL {ident}").collect()[0]
            location = str(detail["location"])
        return cls(spark, ident, location)

    def snapshot(self, app: str) -> Snapshot:
        """The table's latest log state (its transaction for ``app``, the dblog properties)."""
        if not self.location:
            return Snapshot(-1, None, None, None, None)
        view = jvm(self.spark)
        session: Any = self.spark
        log = view.org.apache.spark.sql.delta.DeltaLog.forTable(session._jsparkSession,
                                                               self.location)
        none = view.scala.Option.empty()
        snap = log.update(False, none, none)
        if snap.version() < 0:
            return Snapshot(-1, None, None, None, None)
        txn = newest_txn(log, int(snap.version()), app)
        if txn is None:
            found = snap.transactions().get(app)
            txn = int(found.get()) if found.isDefined() else None
        conf = snap.metadata().configuration()
        key, epoch = conf.get(KEY_PROPERTY), conf.get(EPOCH_PROPERTY)
        return Snapshot(int(snap.version()), txn,
                        str(key.get()) if key.isDefined() else None,
                        int(epoch.get()) if epoch.isDefined() else None,
                        str(snap.schema().json()))


class Fence:
    """Fenced commits of one pipeline at one epoch (see the module docstring).

    The log is read once per table and run; afterwards the fence knows the version it
    committed last, and a newer epoch shows as a MERGE delta-spark skipped. A DELETE does not
    tell a skip (nor one that matched nothing and committed nothing), nor does an append, so
    the log is read again after them. A read takes this pipeline's transaction from the newest
    commit file when that commit carries one (:func:`newest_txn`: the case after this
    fence's own commit), and only otherwise from the snapshot's state (a Spark job)."""

    def __init__(self, spark: SparkSession, pipeline: str, epoch: int) -> None:
        self.spark, self.pipeline, self.epoch = spark, pipeline, epoch
        self.app = app_id(pipeline)
        self._last: dict[str, int | None] = {}
        """Per table location: this epoch's last transaction version there (None: none)."""

    def check(self, table: SparkDeltaTable) -> Snapshot:
        snap = table.snapshot(self.app)
        newest = snap.newest_epoch()
        if newest > self.epoch:
            raise LeadershipLost(
                f"Delta table {table.ident} refused the commit of pipeline {self.pipeline!r} "
                f"at epoch {self.epoch}: epoch {newest} committed there (this instance was "
                "deposed)")
        held = snap.txn is not None and snap.txn >> EPOCH_SHIFT == self.epoch
        self._last[table.location] = snap.txn if held else None
        return snap

    def version(self, table: SparkDeltaTable, seq: int) -> int:
        """Above this epoch's last version in the table, so delta-spark never skips it."""
        if table.location not in self._last:
            self.check(table)
        low, last = max(seq, 0) & _LOW, self._last[table.location]
        if last is not None:
            low = max(low, (last & _LOW) + 1)
        return (self.epoch << EPOCH_SHIFT) | low

    def commit(self, table: SparkDeltaTable, seq: int,
               action: Callable[[], list[Row] | None]) -> list[Row] | None:
        """Run ``action`` (one Delta command) as a fenced commit: an empty result (a MERGE
        delta-spark skipped: a newer epoch's transaction is there) raises LeadershipLost; an
        action returning None (a DELETE) is followed by a read of the log."""
        version = self.version(table, seq)
        result = self._under(version, action)
        if result is None:
            self.check(table)
        elif not result:
            self.check(table)
            raise LeadershipLost(f"Delta table {table.ident} skipped the commit of pipeline "
                                 f"{self.pipeline!r} at epoch {self.epoch}: a newer one wrote")
        self._last[table.location] = max(version, self._last.get(table.location) or 0)
        return result

    def commit_blind(self, table: SparkDeltaTable, seq: int, action: Callable[[], None]) -> None:
        """Run ``action`` (an append) as a fenced commit and read the log after it: the
        commit must be there under this epoch's version (delta-spark skips a write whose
        version a newer epoch passed, silently). The read is cheap when it landed: the
        newest commit then carries this version (:func:`newest_txn`); anything else (a
        skip, or a commit after it) is decided from the snapshot's state, as before."""
        version = self.version(table, seq)
        self._under(version, action)
        found = self.check(table).txn  # raises LeadershipLost where a newer epoch wrote
        if found != version:
            raise FatalOutputError(f"Delta table {table.ident}: the append of pipeline "
                                   f"{self.pipeline!r} at version {version} is not in its log "
                                   f"(its transaction there is {found})")
        self._last[table.location] = version

    def _under(self, version: int, action: Callable[[], T]) -> T:
        """``action`` with the session's Delta transaction set to this pipeline at ``version``
        (delta-spark records it in the command's commit, or skips the command)."""
        conf = self.spark.conf
        conf.set(TXN_APP, self.app)
        conf.set(TXN_VERSION, str(version))
        try:
            return action()
        finally:
            conf.unset(TXN_APP)
            conf.unset(TXN_VERSION)

    def claim(self, table: SparkDeltaTable, empty: Callable[[], None],
              snap: Snapshot | None = None) -> None:
        """Fence older epochs out of ``table``: the ``dblog.epoch`` property (a metadata
        change, which fails commits prepared before it), then ``empty`` appends no rows under
        this epoch's transaction. Nothing to do when this epoch holds the table already.
        ``snap``: this fence's check of the table just now (spares reading the log again)."""
        snap = snap or self.check(table)
        if snap.epoch == self.epoch and self._last[table.location] is not None:
            return
        if snap.epoch != self.epoch:
            self.spark.sql(f"ALTER TABLE {table.ident} SET TBLPROPERTIES "
                           f"('{EPOCH_PROPERTY}' = '{self.epoch}')")

        def append() -> None:
            empty()

        self.commit(table, 0, append)
