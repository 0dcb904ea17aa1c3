"""The Spark output's ``delta`` sink: replica tables written with delta-spark, in the ``delta``
output's layout, so either output (or a reader) sees the same tables.

Per table plan of the apply core (:mod:`dblog.replica`), in plan order: truncate (a fenced
``DELETE`` of every row whose guard is below it), then one guarded MERGE whose source is a
DataFrame built from the Arrow batch of the ``delta`` output (:func:`delta_table.batch`)::

    MERGE INTO t USING s ON <key equality [and the batch's key range]>
    WHEN MATCHED AND (<s's guard is greater>) THEN UPDATE SET *
    WHEN NOT MATCHED THEN INSERT *

A batch whose keys (one integer key column) all lie above the greatest stored key is appended
instead (:meth:`SparkDeltaWriter._beyond_stored_keys`): the MERGE would insert every row.
Columns the source did not send (``keep``) are filled from the stored rows read through
Spark before the MERGE. The checkpoint row follows the tables (:mod:`.spark_checkpoint`).
As with the ``delta`` output, a crash between two tables' commits leaves some tables ahead of
the checkpoint, which is sound: every MERGE is guarded, and an append holds only keys no
stored row had (a replay finds them stored and MERGEs), so the replay is a no-op where it was
applied.

A truncate's DELETE leaves no tombstones, so its barrier alone refuses the older changes a
replay brings: as in the ``delta`` output (whose docstring argues it sound, fencing included),
the checkpoint row stores the new barrier (with the stored state and seq) before the DELETE,
and ``open`` deletes again below every stored barrier (a crash between the two).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from dblog.core.model import Key, Row, TableId, TableInfo
from dblog.errors import FatalOutputError
from dblog.replica import Guard, RowChange, TablePlan, decoded_rows, kept

from . import delta_table as dtab
from .spark_checkpoint import NAME, SparkCheckpointTable, create_statement
from .spark_config import SparkDeltaSink
from .spark_session import arrow_frame, jvm
from .spark_target import Fence, Snapshot, SparkDeltaTable
from .sql_checkpoint import StoredCheckpoint
from .sql_kinds import (
    DELETED,
    GUARD_MAJOR,
    GUARD_MINOR,
    ColumnKind,
    add_row_kinds,
    from_db,
    kinds_of,
    require_info,
    to_db,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Lookup = Callable[[TableId], TableInfo | None]
MisfitFix = Callable[[TableId, str], str]
AUTO_MERGE = "spark.databricks.delta.schema.autoMerge.enabled"
FIX = "delete the table (its folder) so that dblog creates it, then dump the source again"
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError)


@dataclass
class Replica:
    source: TableId
    table: SparkDeltaTable
    kinds: dict[str, ColumnKind]
    key: tuple[str, ...]


def name_pattern(template: str) -> re.Pattern[str]:
    """The names ``template`` makes, with the schema and table as groups."""
    parts = re.split(r"(\{schema\}|\{table\})", template)
    body = "".join("(?P<schema>.+?)" if p == "{schema}" else "(?P<table>.+?)"
                   if p == "{table}" else re.escape(p) for p in parts)
    return re.compile(f"^{body}$")


def check_layout(table: SparkDeltaTable, snap: Snapshot, kinds: dict[str, ColumnKind],
                 key: tuple[str, ...]) -> None:
    """Refuse an existing table a replica cannot use (the ``delta`` output's rules)."""
    where = table.ident
    if snap.key is None:
        raise FatalOutputError(f"Delta table {where} exists but is not a dblog replica (no "
                               f"{dtab.KEY_PROPERTY} property)", fix=FIX + ", or set table_path")
    if list(orjson.loads(snap.key)) != list(key):
        raise FatalOutputError(f"Delta table {where} replicates key {snap.key}, the source "
                               f"has {list(key)}", fix=FIX)
    stored = snap.schema()
    assert stored is not None
    have = {f.name: f.dataType for f in stored.fields}
    want = {f.name: f.dataType for f in from_arrow_schema(dtab.arrow_schema(kinds)).fields}
    missing = [c for c in want if c.startswith("_dblog_") and c not in have]
    if missing:
        raise FatalOutputError(f"Delta table {where} lacks {missing}", fix=FIX)
    for column, kind in kinds.items():
        if column in have and have[column] != want[column]:
            raise FatalOutputError(
                f"Delta table {where}: column {column} is {have[column].simpleString()}, the "
                f"source's {kind.kind.value} values need {want[column].simpleString()}",
                fix=FIX)


def _misfit(kinds: dict[str, ColumnKind], key: tuple[str, ...],
            changes: kept.Changes) -> tuple[str, RowChange, Any] | None:
    """The first (column, change, value) whose value the column's Arrow type cannot take."""
    for column, kind in kinds.items():
        arrow = dtab.arrow_type(kind)
        for change, row in changes:
            value = change.key[key.index(column)] if column in key else \
                None if row is None else row.get(column)
            try:
                dtab.column_array(kind, [value], arrow)
            except _ARROW_ERRORS:
                return column, change, value
    return None


def arrow_batch(replica: Replica, changes: kept.Changes,
                fix: MisfitFix) -> pa.Table:
    """The MERGE source (:func:`delta_table.batch`); a value its column's type cannot hold
    (a table typed by other metadata, or the apply job's inference from other records) is a
    FatalOutputError naming the table, the column, the change and ``fix``, not Arrow's
    message: Arrow does not say which column failed, and the same batch fails again."""
    try:
        return dtab.batch(replica.kinds, replica.key, changes)
    except _ARROW_ERRORS as exc:
        found = _misfit(replica.kinds, replica.key, changes)
        if found is None:
            raise
        column, change, value = found
        arrow = dtab.arrow_type(replica.kinds[column])
        raise FatalOutputError(
            f"Delta table {replica.table.ident}: column {column} holds {arrow}; the change at "
            f"seq {change.seq} (key {list(change.key)}) carries {value!r:.80}, which does not "
            f"fit ({type(exc).__name__})", fix=fix(replica.source, column)) from None


def _default_fix(source: TableId, column: str) -> str:
    return FIX


class SparkDeltaWriter:
    """The delta sink of one Spark output run (opened per run, bound to one epoch)."""

    def __init__(self, spark: SparkSession, config: SparkDeltaSink, lookup: Lookup,
                 pipeline: str, epoch: int, checkpoint: bool = True,
                 misfit_fix: MisfitFix = _default_fix, kept_note: str = "") -> None:
        """``checkpoint``: keep the pipeline's row in ``_dblog_checkpoint`` (the apply job,
        whose progress is Spark's own checkpoint, has none). ``misfit_fix``: the fix of a
        value its column cannot hold (:func:`arrow_batch`); ``kept_note``: why a change's
        kept columns may be missing here, added to the warning of a left-out change
        (:class:`dblog.replica.kept.LeftOut`)."""
        self.spark, self.config, self.lookup = spark, config, lookup
        self.misfit_fix, self.kept_note = misfit_fix, kept_note
        self.fence = Fence(spark, config.pipeline or pipeline, epoch)
        self.replicas: dict[TableId, Replica] = {}
        self.checkpoint = SparkCheckpointTable(spark, self._table(NAME), self.fence) \
            if checkpoint else None
        self.metrics: list[dict[str, Any]] = []
        self.greatest: dict[TableId, Any] = {}
        """Per replica table with an integer key: the greatest key stored (None: empty)."""

    def _table(self, name: str) -> SparkDeltaTable:
        if self.config.path is not None:
            return SparkDeltaTable.at_path(self.spark, f"{self.config.path.rstrip('/')}/{name}")
        assert self.config.database is not None
        return SparkDeltaTable.in_catalog(self.spark, self.config.database, name)

    def _name(self, table: TableId) -> str:
        template = self.config.table_path if self.config.path else self.config.table_name
        return template.format(schema=table.schema, table=table.name)

    # -- open -----------------------------------------------------------------------------------

    def open(self) -> StoredCheckpoint:
        """Claim the checkpoint and every existing replica table for this epoch; refuse a
        table of a known source table that a replica cannot use (before any event)."""
        if self.config.database is not None:
            self.spark.sql(f"CREATE DATABASE IF NOT EXISTS `{self.config.database}`")
        stored = StoredCheckpoint(self.fence.epoch, 0, None, None)
        if self.checkpoint is not None:
            stored = self.checkpoint.open(lambda: self._table(NAME))
        pattern = name_pattern(self.config.table_path if self.config.path
                               else self.config.table_name)
        names = self._existing()
        for name in names:
            table = self._table(name)
            snap = self.fence.check(table)
            match = pattern.match(name)
            info = None if match is None else self.lookup(TableId(match["schema"],
                                                                  match["table"]))
            if info is not None:
                kinds = kinds_of(info)
                check_layout(table, snap, kinds, info.key_columns)
            if snap.key is not None:
                self.fence.claim(table, self._empty(table), snap)
        self._clear_below(stored, set(names))
        return stored

    def _clear_below(self, stored: StoredCheckpoint, names: set[str]) -> None:
        """Delete again below each stored barrier (a no-op where its DELETE landed)."""
        for source, barrier in stored.barriers.items():
            name = self._name(source)
            if name in names:
                table = self._table(name)
                where = dtab.guard_below(barrier)
                self.fence.commit(table, stored.seq, partial(self._delete, table, where))

    def _existing(self) -> list[str]:
        """Names of the Delta tables beside the checkpoint (folders, or catalog tables)."""
        if self.config.database is not None:
            return sorted(t.name for t in self.spark.catalog.listTables(self.config.database)
                          if t.name != NAME)
        assert self.config.path is not None
        view = jvm(self.spark)
        session: Any = self.spark
        root = view.org.apache.hadoop.fs.Path(self.config.path)
        fs = root.getFileSystem(session._jsc.hadoopConfiguration())
        if not fs.exists(root):
            return []
        names = []
        for status in fs.listStatus(root):
            path = status.getPath()
            if status.isDirectory() and path.getName() != NAME and \
                    fs.exists(view.org.apache.hadoop.fs.Path(path, "_delta_log")):
                names.append(str(path.getName()))
        return sorted(names)

    def _empty(self, table: SparkDeltaTable) -> Callable[[], None]:
        def append() -> None:
            schema = self.spark.read.format("delta").load(table.location).schema
            self.spark.createDataFrame([], schema).write.format("delta").mode("append") \
                .save(table.location)
        return append

    # -- a plan ---------------------------------------------------------------------------------

    def apply(self, plan: TablePlan, seq: int, truncate_where: str | None = None) -> None:
        """One table plan: truncate, then one guarded MERGE (each a fenced commit).
        ``truncate_where`` replaces the truncate's "guard below" condition (the apply job's
        truncates hold for one Kafka partition)."""
        replica = self._replica(plan.table)
        if plan.truncate is not None:
            if self.checkpoint is not None:  # the barrier before its DELETE (module docstring)
                self.checkpoint.store_barrier(plan.table, plan.truncate, seq)
            where = truncate_where or dtab.guard_below(plan.truncate)
            self.fence.commit(replica.table, seq, partial(self._delete, replica.table, where))
        rows = decoded_rows(plan)
        added = add_row_kinds(replica.kinds, rows, lambda: self.lookup(replica.source))
        changes = kept.with_kept(list(zip(plan.changes, rows, strict=True)),
                                 partial(self.stored_rows, replica),
                                 kept.LeftOut(str(replica.source),
                                              f"{replica.table.ident}{self.kept_note}"))
        if not changes:
            return
        source = arrow_batch(replica, changes, self.misfit_fix)
        try:
            if self._beyond_stored_keys(replica, source):
                self.metrics.append(self._append(replica, source, seq, added))
            else:
                self.metrics.append(self._merge(replica, source, seq, added))
        except BaseException:
            self.greatest.pop(replica.source, None)  # the commit may have landed: read again
            raise
        self._note_greatest(replica, source)

    def _beyond_stored_keys(self, replica: Replica, source: pa.Table) -> bool:
        """Whether every key of ``source`` lies above the table's greatest stored key (an
        integer key of one column): then the MERGE would insert every row, which an append
        does without joining the table (a dump into an empty or growing table). The greatest
        key is read once per table and run, then kept from this writer's own commits: only
        this pipeline writes its replica tables (a newer epoch's commit fails the fence), and
        truncates and purges only lower it, which makes the test stricter, never wrong. An
        older epoch cannot add keys after the read either: :meth:`_replica` claimed the table
        for this epoch before (at open, or at its first use in the run when it did not exist
        then), so a deposed leader's append is skipped or fails its commit; without that
        claim its append would land after the read and this one beside it (blind appends do
        not conflict): each key twice."""
        column = dtab.integer_key(replica.kinds, replica.key)
        if column is None:
            return False
        if replica.source not in self.greatest:
            frame = self.frame(replica)
            self.greatest[replica.source] = frame.agg(F.max(frame[column])).collect()[0][0]
        return dtab.above(source, column, self.greatest[replica.source])

    def _note_greatest(self, replica: Replica, source: pa.Table) -> None:
        if replica.source in self.greatest:
            high = pc.max(source.column(replica.key[0])).as_py()
            stored = self.greatest[replica.source]
            self.greatest[replica.source] = high if stored is None else max(stored, high)

    def _append(self, replica: Replica, source: pa.Table, seq: int,
                added: bool) -> dict[str, Any]:
        writer = arrow_frame(self.spark, source).write.format("delta").mode("append")
        if added:
            writer = writer.option("mergeSchema", "true")
        self.fence.commit_blind(replica.table, seq,
                                lambda: writer.save(replica.table.location))
        return {"num_target_rows_inserted": source.num_rows, "appended": True}

    def _delete(self, table: SparkDeltaTable, where: str) -> None:
        """A DELETE's result does not tell a skipped commit (nor one that matched nothing
        and committed nothing): the fence's check after it is what refuses."""
        self.spark.sql(f"DELETE FROM {table.ident} WHERE {where}").collect()

    def _merge(self, replica: Replica, source: pa.Table, seq: int,
               added: bool) -> dict[str, Any]:
        predicate = dtab.merge_predicate(replica.kinds, replica.key, source)
        view = f"dblog_src_{uuid.uuid4().hex[:12]}"
        arrow_frame(self.spark, source).createOrReplaceTempView(view)
        sql = (f"MERGE INTO {replica.table.ident} t USING {view} s ON {predicate} "
               f"WHEN MATCHED AND ({dtab.NEWER}) THEN UPDATE SET * "
               "WHEN NOT MATCHED THEN INSERT *")
        if added:
            self.spark.conf.set(AUTO_MERGE, "true")
        try:
            result = self.fence.commit(replica.table, seq,
                                       lambda: self.spark.sql(sql).collect())
        finally:
            self.spark.catalog.dropTempView(view)
            if added:
                self.spark.conf.unset(AUTO_MERGE)
        return result[0].asDict() if result else {}

    def frame(self, replica: Replica) -> DataFrame:
        return self.spark.read.format("delta").load(replica.table.location)

    def stored_rows(self, replica: Replica, keys: set[Key]
                    ) -> dict[Key, tuple[Guard, Row | None]]:
        """The stored rows of ``keys`` (filtered on the first key column, then matched)."""
        first, kinds = replica.key[0], replica.kinds
        values = list({to_db(kinds[first], "delta", k[0]) for k in keys})
        out: dict[Key, tuple[Guard, Row | None]] = {}
        frame = self.frame(replica)
        for record in frame.where(frame[first].isin(values)).collect():
            raw = record.asDict()
            row = {c: from_db(k, raw.get(c)) for c, k in kinds.items()}
            found = tuple(row[k] for k in replica.key)
            if found in keys:
                guard = Guard(raw[GUARD_MAJOR], raw[GUARD_MINOR])
                out[found] = (guard, None if raw[DELETED] else row)
        return out

    def _replica(self, source: TableId) -> Replica:
        replica = self.replicas.get(source)
        if replica is not None:
            return replica
        info = require_info(self.lookup, source, "spark output", "SparkOutput")
        kinds = kinds_of(info)
        name = self._name(source)
        table = self._table(name)
        properties = {dtab.KEY_PROPERTY: orjson.dumps(list(info.key_columns)).decode(),
                      dtab.EPOCH_PROPERTY: str(self.fence.epoch)}
        self.spark.sql(create_statement(table.ident, dtab.arrow_schema(kinds), properties,
                                        self.config.partition_by.get(str(source))))
        if not table.location:
            table = self._table(name)
        snap = self.fence.check(table)
        check_layout(table, snap, kinds, info.key_columns)
        # a table created after open (by this run, or by a deposed leader still flushing) is
        # claimed before anything is read from it: see _beyond_stored_keys
        self.fence.claim(table, self._empty(table), snap)
        replica = self.replicas[source] = Replica(source, table, kinds, info.key_columns)
        return replica

    def snapshot(self, source: TableId) -> Snapshot:
        """The log state of ``source``'s replica table (version -1: none yet)."""
        return self._table(self._name(source)).snapshot(self.fence.app)

    def purge(self, bound: Guard, seq: int) -> None:
        """Delete tombstones below ``bound`` in every table this run wrote."""
        for replica in self.replicas.values():
            where = f"{DELETED} AND ({dtab.guard_below(bound)})"
            self.fence.commit(replica.table, seq, partial(self._delete, replica.table, where))

    def tables(self) -> Iterable[Replica]:
        return self.replicas.values()
