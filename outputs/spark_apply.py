"""The Spark apply job: Structured Streaming reads dblog's Kafka topics with Spark's Kafka
source (``read_committed``) and applies each micro-batch to Delta tables with ``foreachBatch``
and the Spark output's guarded MERGE (:class:`.spark_delta.SparkDeltaWriter`); Spark's
checkpoint keeps the offsets. ``dblog spark-apply --config job.yaml`` runs it; so does
:func:`run_apply` (or :class:`ApplyJob` for a caller's own session); docs/outputs/spark.md.

The guard of a record is its place in Kafka, ``(major, minor) = (offset, partition)``. Why not
the source's guard: the records of one table's topic do not carry the transaction's commit
position a PostgreSQL guard needs (only BEGIN/COMMIT carry it; they are not in table topics),
and dblog keeps a key's records in one partition in stream order, so a key's offsets are its
stream order. A record sent again (an at-least-once repeat after a capture crash) comes later
with the same content, and a micro-batch Spark runs again after a crash of the job meets its
own rows (equal guards, no change). A truncate is a record on every partition of its table's
topic: each deletes the rows of its own partition below its offset
(``minor = p AND major < o``). This needs a fixed partition count (adding partitions moves
keys, for every Kafka consumer).

Each micro-batch is collected to the driver (``max_offsets_per_trigger`` bounds it) and
reduced by the apply core (last change per key, tombstones, kept TOAST columns) before its
MERGEs, one per table (one per table and partition when a truncate is in the batch).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from dblog.core.model import ChangeEvent, ColumnInfo, Op, TableId, TableInfo
from dblog.errors import ConfigError, DblogError, FatalOutputError
from dblog.replica import Guard, TablePlan
from dblog.replica.reduce import Fold

from .spark_apply_config import ApplyConfig, TableSpec, native, tombstone
from .spark_config import SparkConfig
from .spark_delta import SparkDeltaWriter
from .spark_session import check_classes, start_session
from .spark_target import Snapshot, classify
from .sql_kinds import GUARD_COLUMNS, GUARD_MAJOR, GUARD_MINOR

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import DataType

log = logging.getLogger("dblog.outputs.spark_apply")


@dataclass(frozen=True, slots=True)
class Record:
    partition: int
    offset: int
    doc: dict[str, Any]

    @property
    def table(self) -> TableId:
        return TableId(self.doc["schema"], self.doc["table"])

    def event(self) -> ChangeEvent:
        """The change; a key change arrives as the old key's delete record (in its own
        partition) and this upsert, so ``old_key`` is left out: with it the fold would also
        write the old key's tombstone under this record's guard, an offset of another
        partition, which does not order against the old key's own records (a later insert of
        the old key could be refused). Unchanged TOAST columns of a key change are therefore
        read under the new key, where the table does not hold them (:data:`KEPT_NOTE`)."""
        doc = self.doc
        key = doc.get("key")
        return ChangeEvent(Op(doc["op"]), self.table, None if key is None else tuple(key),
                           after=doc.get("after"), unchanged=tuple(doc.get("unchanged", ())),
                           seq=int(doc.get("seq", -1)))


_STORED_TYPES = {"bigint": "bigint", "int": "bigint", "smallint": "bigint", "tinyint": "bigint",
                 "double": "double precision", "float": "double precision",
                 "boolean": "boolean", "string": "text"}


def _type_name(value: Any) -> str | None:
    """The type a column takes from its first non-null value (None: not known yet)."""
    for kind, name in ((bool, "boolean"), (int, "bigint"), (float, "double precision"),
                       (str, "text")):
        if isinstance(value, kind):
            return name
    return None if value is None else "any"


def stored_type(data_type: DataType) -> str:
    """A source type name whose kind the replica stores as ``data_type`` (the layout's
    types: bigint, double, boolean, string, decimal). A string column reads as ``text``: a
    JSON column (``any``) is stored as string too, and only a table entry can tell them."""
    name = data_type.simpleString()
    if name.startswith("decimal"):
        return "numeric" + name[len("decimal"):]
    return _STORED_TYPES.get(name, name)


def stored_info(table: TableId, snap: Snapshot) -> TableInfo | None:
    """The key and column types of the job's existing replica table (None: no table)."""
    schema = snap.schema()
    if schema is None or snap.key is None:
        return None
    columns = tuple(ColumnInfo(f.name, stored_type(f.dataType)) for f in schema.fields
                    if f.name not in GUARD_COLUMNS)
    return TableInfo(table, columns, tuple(orjson.loads(snap.key)))


def _value_types(docs: Iterable[dict[str, Any]]) -> dict[str, str]:
    """Each column's type from its first non-null value; a column null in every record is
    left out (a null tells no type: the column is added once a value comes)."""
    types: dict[str, str] = {}
    for doc in docs:
        after = doc.get("after")
        for column, value in after.items() if isinstance(after, dict) else ():
            name = _type_name(value)
            if name is not None:
                types.setdefault(column, name)
    return types


def _key_columns(table: TableId, docs: Iterable[dict[str, Any]]) -> tuple[str, ...]:
    """The after-image's columns that hold the key values in every record."""
    candidates: list[set[str]] | None = None
    for doc in docs:
        after, key = doc.get("after"), doc.get("key")
        if not isinstance(after, dict) or key is None:
            continue
        found = [{c for c, v in after.items() if v == k and type(v) is type(k)} for k in key]
        candidates = found if candidates is None else \
            [a & b for a, b in zip(candidates, found, strict=True)]
    if candidates is None or any(len(c) != 1 for c in candidates):
        raise FatalOutputError(f"spark-apply: cannot tell the key columns of {table} from its "
                               f"records (candidates {candidates})",
                               fix=f"set tables.{table}.key (and columns) in the job's "
                                   "configuration")
    return tuple(next(iter(c)) for c in candidates)


def infer_table(table: TableId, docs: list[dict[str, Any]],
                stored: TableInfo | None = None) -> TableInfo:
    """Key names and column types from records (see the config's docstring). Where the job's
    Delta table exists (``stored``), its key and column types win and only the columns it
    lacks are inferred: a run infers from its own first batch, which after a restart is not
    the batch that created the table; inferring again would type a column by other values
    (or by a null) and refuse the job's own table, for every retry of that batch."""
    types = _value_types(docs)
    if stored is not None:
        known = {c.name for c in stored.columns}
        extra = tuple(ColumnInfo(c, t) for c, t in types.items() if c not in known)
        return TableInfo(table, stored.columns + extra, stored.key_columns)
    key = _key_columns(table, docs)
    return TableInfo(table, tuple(ColumnInfo(c, t) for c, t in types.items()), key)


KEPT_NOTE = (
    " (spark-apply: the usual cause is a key change whose new row keeps unchanged TOAST "
    "columns of the old key, whose row is in another Kafka partition and may already be a "
    "tombstone, docs/outputs/spark.md; to stop it, ALTER TABLE <source table> REPLICA "
    "IDENTITY FULL on the source so that no column is sent unchanged)")


def misfit_fix(table: TableId, column: str) -> str:
    return (f"name the source's type in tables.{table}.columns.{column} (and the key in "
            f"tables.{table}.key) in the job's configuration, delete the Delta table and "
            "restart the job with a new checkpoint_location (the topics are read again)")


class JobTables:
    """The job's table metadata: the configuration's entries, else inferred once."""

    def __init__(self, specs: dict[str, TableSpec]) -> None:
        self.infos: dict[TableId, TableInfo] = {}
        for name, spec in specs.items():
            table = TableId.parse(name)
            columns = tuple(ColumnInfo(c, t) for c, t in spec.columns.items())
            self.infos[table] = TableInfo(table, columns, tuple(spec.key))

    def lookup(self, table: TableId) -> TableInfo | None:
        return self.infos.get(table)

    def learn(self, records: Iterable[Record],
              stored: Callable[[TableId], TableInfo | None]) -> None:
        """Infer the tables the configuration does not name, from ``records`` and their
        existing Delta table (``stored``)."""
        unknown: dict[TableId, list[dict[str, Any]]] = defaultdict(list)
        for record in records:
            if record.table not in self.infos:
                unknown[record.table].append(record.doc)
        for table, docs in unknown.items():
            self.infos[table] = infer_table(table, docs, stored(table))
            log.info("spark-apply: %s inferred: key %s", table, self.infos[table].key_columns)


def decode(rows: Iterable[Any], topics: dict[str, TableId] | None = None,
           table_of: Callable[[str], tuple[str, str] | None] = lambda _: None
           ) -> list[Record]:
    """Kafka rows (topic, partition, offset, key, value) as records in partition and offset
    order; a tombstone (null value) is the delete of its key, in the table its topic carries
    (``topics``, learned from the records, else ``table_of`` the topic template);
    transaction markers are left out; a record of another format is refused."""
    topics = {} if topics is None else topics
    out, nulls = [], []
    for row in rows:
        if row["value"] is None:
            nulls.append(row)
        elif (doc := native(row)) is not None:
            out.append(Record(int(row["partition"]), int(row["offset"]), doc))
            topics.setdefault(row["topic"], TableId(doc["schema"], doc["table"]))
    for row in nulls:
        named = table_of(row["topic"])
        table = topics.get(row["topic"]) or (None if named is None else TableId(*named))
        out.append(Record(int(row["partition"]), int(row["offset"]), tombstone(row, table)))
    out.sort(key=lambda r: (r.partition, r.offset))
    return out


def plan_records(records: list[Record]) -> list[tuple[TablePlan, int | None]]:
    """Table plans, each with the partition its truncate holds for (None: no truncate)."""
    by_table: dict[TableId, list[Record]] = defaultdict(list)
    for record in records:
        by_table[record.table].append(record)
    out: list[tuple[TablePlan, int | None]] = []
    for table_records in by_table.values():
        groups: dict[int | None, list[Record]] = defaultdict(list)
        split = any(r.doc["op"] == Op.TRUNCATE.value for r in table_records)
        for record in table_records:
            groups[record.partition if split else None].append(record)
        for partition, group in groups.items():
            fold = Fold({})
            for record in group:
                fold.add(record.event(), Guard(record.offset, record.partition))
            out.extend((plan, partition) for plan in fold.plans())
    return out


class ApplyJob:
    """One run of the apply job (open, then start; stop ends it)."""

    def __init__(self, config: ApplyConfig, session: SparkSession | None = None) -> None:
        self.config, self._given = config, session
        self.tables = JobTables(config.tables)
        self.spark: SparkSession | None = None
        self.writer: SparkDeltaWriter | None = None
        self.query: StreamingQuery | None = None
        self.batches = 0
        self.topics: dict[str, TableId] = {}
        """The table of each topic, from its records (a tombstone's table)."""
        self.failure: DblogError | None = None
        """The error that stopped a micro-batch (run_apply raises it)."""

    def _session_config(self) -> SparkConfig:
        c = self.config
        return SparkConfig(master=c.master, app_name=c.app_name, conf=c.conf, jars=c.jars,
                           connect_timeout_s=c.connect_timeout_s, sinks=[c.delta])

    def open(self) -> None:
        """Start or adopt the session, check it and every existing table the configuration
        names, before any record is read."""
        if self._given is not None:
            check_classes(self._given, True, True)
            base = self._given
        else:
            base, _ = start_session(self._session_config(), kafka=True)
        try:
            spark = self.spark = base.newSession()
            self.writer = SparkDeltaWriter(spark, self.config.delta, self.tables.lookup,
                                           self.config.name, 0, checkpoint=False,
                                           misfit_fix=misfit_fix, kept_note=KEPT_NOTE)
            self.writer.open()
        except Exception as exc:
            raise classify(exc, "opening the Spark apply job") from exc

    def apply_batch(self, frame: DataFrame, batch_id: int) -> None:
        """foreachBatch: one micro-batch of Kafka rows applied to the Delta tables."""
        try:
            self._apply(frame, batch_id)
        except DblogError as exc:
            self.failure = exc  # the query's exception is Spark's wrapper of its text
            raise

    def _apply(self, frame: DataFrame, batch_id: int) -> None:
        writer = self.writer
        assert writer is not None
        rows = frame.select("topic", "partition", "offset", "key", "value").collect()
        records = decode(rows, self.topics, self.config.kafka.table_of)
        self.tables.learn(records, lambda table: stored_info(table, writer.snapshot(table)))
        for plan, partition in plan_records(records):
            holds = None if partition is None or plan.truncate is None else \
                f"{GUARD_MINOR} = {partition} AND {GUARD_MAJOR} < {plan.truncate.major}"
            writer.apply(plan, batch_id, truncate_where=holds)
        self.batches += 1
        log.info("spark-apply: batch %d: %d record(s) applied", batch_id, len(records))

    def start(self) -> StreamingQuery:
        spark, kafka = self.spark, self.config.kafka
        if spark is None:
            raise ConfigError("the apply job is not open", fix="call open() before start()")
        reader = (spark.readStream.format("kafka")
                  .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
                  .option("kafka.isolation.level", "read_committed")
                  .option("startingOffsets", kafka.starting_offsets)
                  .option("failOnDataLoss", "true"))
        if kafka.topics is not None:
            reader = reader.option("subscribe", ",".join(kafka.topics))
        else:
            assert kafka.topic_pattern is not None
            reader = reader.option("subscribePattern", kafka.topic_pattern)
        if kafka.max_offsets_per_trigger is not None:
            reader = reader.option("maxOffsetsPerTrigger", str(kafka.max_offsets_per_trigger))
        for key, value in kafka.options.items():
            reader = reader.option(key, value)
        self.query = (reader.load().writeStream.foreachBatch(self.apply_batch)
                      .option("checkpointLocation", self.config.checkpoint_location)
                      .trigger(processingTime=f"{self.config.trigger_interval_s} seconds")
                      .queryName(self.config.name).start())
        return self.query

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()
            self.query = None


def run_apply(config: ApplyConfig, session: SparkSession | None = None,
              stop: threading.Event | None = None) -> None:
    """Run the job until ``stop`` is set (or SIGTERM/SIGINT in the main thread) or it fails."""
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    job = ApplyJob(config, session)
    job.open()
    query = job.start()
    try:
        while not stop.is_set() and query.isActive:
            stop.wait(1.0)
        failure = query.exception()
        if failure is not None and job.failure is not None:
            raise job.failure
        if failure is not None:
            raise FatalOutputError(f"the Spark apply job failed: {failure}",
                                   fix="see the job's log; it resumes from its checkpoint")
    finally:
        job.stop()


def main(path: str) -> int:
    """``dblog spark-apply --config <path>``."""
    from .spark_apply_config import load_apply_config

    try:
        run_apply(load_apply_config(path))
    except DblogError as exc:
        print(f"dblog spark-apply: {exc}", file=sys.stderr)
        return 2
    return 0
