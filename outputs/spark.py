"""The Spark output (``type: spark``): each flush is one micro-batch, built from Arrow and
written by Spark's own connectors to the output's sinks; docs/outputs/spark.md.

* ``delta`` (:mod:`.spark_delta`): replica tables through delta-spark MERGEs with the apply
  core's guard, tombstones and truncate barriers, the sink checkpoint in
  ``_dblog_checkpoint``, every commit fenced on the leader epoch (:mod:`.spark_target`);
* ``kafka`` (:mod:`.spark_kafka`): the ``kafka`` output's topics and records through Spark's
  Kafka sink (at-least-once).

A flush writes the Kafka sinks first and the Delta sink (with the checkpoint) last, and
acknowledges once Spark returned from all of them: a checkpoint the engine may adopt is never
ahead of what Kafka holds. The checkpoint row (a MERGE of its own, about a second here) is
written when the flush carries a checkpoint (``flush_checkpoint``) or the guard scheme or a
truncate barrier changed; a commit of ``write`` (``commit_every`` reached) leaves it alone.
With a Delta sink the flush covers the events up to the apply plan's ``through_seq`` (the
batch's last event; a PostgreSQL transaction waits for its COMMIT only under
``POSTGRES_AT_COMMIT``); the Kafka sinks send the same events.

The session is started once per run when ``open`` is called (``local[*]`` by default), or is
the caller's (``SparkOutput(config, session=spark)``, dblog embedded in a Spark driver). The
output works on its own ``newSession()`` of it: the Delta transaction settings it sets per
commit and its temporary views never reach the caller's session.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dblog.core.model import ChangeEvent, TableId, TableInfo
from dblog.errors import DblogError, FatalOutputError
from dblog.formats.base import TableLookup, no_tables
from dblog.replica import Commit, CommitBuffer, Guard, PurgeSchedule, ReplicaProgress
from dblog.spi import Checkpoint, Finding

from .spark_config import SparkConfig
from .spark_delta import SparkDeltaWriter
from .spark_kafka import SparkKafkaWriter
from .spark_session import check_classes, check_master, connector_jars, start_session
from .spark_target import classify
from .sql_checkpoint import StoredCheckpoint

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("dblog.outputs.spark")


class SparkOutput:
    """A :class:`dblog.spi.Output` (also CheckpointingOutput, PipelineBound, FencedOutput,
    DiscardingOutput, Checkable) writing through PySpark."""

    config_model = SparkConfig

    def __init__(self, config: SparkConfig | dict[str, Any], *, name: str | None = None,
                 tables: TableLookup | None = None,
                 session: SparkSession | None = None) -> None:
        self.config = config if isinstance(config, SparkConfig) else SparkConfig(**config)
        self.name = name or f"spark:{self.config.master}"
        self._lookup: TableLookup = tables or no_tables
        self._given = session
        self._session: SparkSession | None = None
        self._own: SparkSession | None = None
        """The session this output started (stopped by ``close``)."""
        self.pipeline, self.epoch = "dblog", 0
        self._fence: Callable[[], bool] | None = None
        self._delta: SparkDeltaWriter | None = None
        self._kafka: list[SparkKafkaWriter] = []
        self._buffer = CommitBuffer(self.config.commit_every, self.config.commit_interval_s,
                                    commit_idle_s=self.config.commit_idle_s)
        self._unsent: list[ChangeEvent] = []  # not sent to the Kafka sinks yet
        self._progress = ReplicaProgress(self.name, "delete the Delta tables, then dump the "
                                                    "source again")
        sink = self.config.delta  # no delta sink: no tombstones to purge
        self._tombstones = PurgeSchedule(None, 0.0) if sink is None else \
            PurgeSchedule(sink.tombstone_margin, sink.purge_interval_s)
        self._open = False
        self._stored_meta: tuple[str | None, dict[TableId, Guard]] = (None, {})
        """The scheme and barriers in the checkpoint row (a commit without a new checkpoint
        rewrites the row only when they changed)."""
        self._last_checkpoint = float("-inf")
        self.session_start_s: float | None = None
        """How long starting the session took (None: the caller's session)."""
        self.batch_seconds: list[float] = []
        """Wall time of each flush that wrote something (the bench reads it)."""
        self.timings = {"plan": 0.0, "kafka": 0.0, "tables": 0.0, "checkpoint": 0.0}
        """Seconds spent per step, summed over the flushes (the bench reads them)."""

    def bind(self, pipeline: str, epoch: int) -> None:
        self.pipeline, self.epoch = pipeline, epoch

    def set_fence(self, may_write: Callable[[], bool]) -> None:
        self._fence = may_write

    def set_tables(self, lookup: Callable[[TableId], TableInfo | None]) -> None:
        self._lookup = lookup

    @property
    def session(self) -> SparkSession:
        """The session this output writes with (started by ``open``)."""
        if self._session is None:
            raise FatalOutputError(f"{self.name} is not open")
        return self._session

    # -- the Output contract ------------------------------------------------------------------

    def open(self, committed_seq: int) -> None:
        """Start (or adopt) the session, check it, claim the Delta tables for this epoch and
        read the checkpoint: every refusal happens here, before the engine reads the log."""
        base = self._base_session()
        try:
            spark = self._session = base.newSession()
            self._kafka = [SparkKafkaWriter(spark, sink, self._lookup, self.pipeline,
                                            self.epoch) for sink in self.config.kafka]
            self._delta = None
            stored = None
            if self.config.delta is not None:
                self._delta = SparkDeltaWriter(spark, self.config.delta, self._lookup,
                                               self.pipeline, self.epoch)
                stored = self._delta.open()
        except Exception as exc:
            raise classify(exc, f"opening {self.name}") from exc
        stored = stored or StoredCheckpoint(self.epoch, 0, None, None)
        checkpoint = stored.checkpoint(self._delta.fence.pipeline if self._delta else
                                       self.pipeline)
        self._progress.restore(stored.scheme, stored.barriers, checkpoint, committed_seq)
        self._stored_meta = (stored.scheme, dict(stored.barriers))
        self._buffer.clear()
        self._unsent = []
        self._open = True

    def _base_session(self) -> SparkSession:
        if self._given is not None:
            check_classes(self._given, self.config.delta is not None, bool(self.config.kafka))
            return self._given
        started = time.monotonic()
        if self._own is not None:
            return self._own
        session, owned = start_session(self.config, bool(self.config.kafka))
        self.session_start_s = time.monotonic() - started
        log.info("Spark session for %s started in %.1f s (master %s)", self.name,
                 self.session_start_s, self.config.master)
        self._own = session if owned else None
        return session

    def write(self, events: Sequence[ChangeEvent]) -> None:
        """Buffer ``events``; write once ``commit_every`` are buffered. A retried call with
        the same batch (after a failed write) does not buffer it twice."""
        if not self._open:
            raise FatalOutputError(f"{self.name} is not open")
        self._buffer.write(events, lambda: self._commit(None), self._hold_for_kafka)

    def _hold_for_kafka(self, events: Sequence[ChangeEvent]) -> None:
        if self._kafka:
            self._unsent.extend(events)

    def flush(self) -> int:
        """Write when due (see ``commit_interval_s``); the acknowledged sequence number."""
        return self._commit(None) if self._buffer.due() else self._progress.durable

    def flush_checkpoint(self, checkpoint: Checkpoint) -> int:
        return self._commit(checkpoint) if self._buffer.due() else self._progress.durable

    def committed_checkpoint(self) -> Checkpoint | None:
        return self._progress.checkpoint

    def close(self) -> None:
        """Write what waits for ``commit_interval_s`` (best effort: it is replayed anyway,
        from the last acknowledged state), then stop the session if this output started it."""
        try:
            if self._open and len(self._buffer):
                self._commit(None)
        except DblogError as exc:
            log.warning("%s: buffered events not written at close: %s", self.name, exc)
        self._open = False
        self._delta, self._kafka = None, []
        if self._own is not None:
            self._own.stop()
            self._own = None
        self._session = None

    def discard(self) -> None:
        """A deposed leader: drop what is buffered, write nothing."""
        self._buffer.clear()
        self._unsent = []
        self.close()

    # -- flushing -----------------------------------------------------------------------------

    def _commit(self, checkpoint: Checkpoint | None) -> int:
        if not self._open:
            raise FatalOutputError(f"{self.name} is not open")
        started = time.monotonic()
        commit = self._progress.begin(self._buffer.events, checkpoint, self._fence,
                                      plan=self._delta is not None)
        if commit is None:
            return self._progress.durable
        self.timings["plan"] += time.monotonic() - started
        try:
            self._send_kafka(commit.through)
            if self._delta is not None:
                commit = self._write_delta(self._delta, commit)
        except Exception as exc:
            raise classify(exc, f"flushing {self.name}") from exc
        self.batch_seconds.append(self._buffer.committed() - started)
        return self._progress.finish(commit)

    def _send_kafka(self, through: int) -> None:
        """Send the events up to ``through`` to every Kafka sink (a retried flush sends only
        what no earlier attempt finished)."""
        if not self._kafka:
            return
        ready = [e for e in self._unsent if e.seq <= through]
        started = time.monotonic()
        if ready:
            for writer in self._kafka:
                writer.send(ready)
        self.timings["kafka"] += time.monotonic() - started
        self._unsent = [e for e in self._unsent if e.seq > through]

    def _write_delta(self, delta: SparkDeltaWriter, commit: Commit) -> Commit:
        """MERGE the tables, then the checkpoint row when due (``checkpoint_interval_s``);
        the commit as written (without a checkpoint when the row was not due)."""
        delta.metrics = []
        started = time.monotonic()
        for table_plan in commit.plan.tables:
            delta.apply(table_plan, commit.through)
        written = time.monotonic()
        assert delta.checkpoint is not None
        meta = (commit.scheme, dict(commit.plan.barriers))
        if commit.checkpoint is not None and \
                written - self._last_checkpoint < delta.config.checkpoint_interval_s:
            commit = dataclasses.replace(commit, checkpoint=None)  # the row keeps the last one
        if commit.checkpoint is not None or meta != self._stored_meta:
            delta.checkpoint.write(commit.checkpoint, meta[0], meta[1], commit.through)
            self._stored_meta = meta
            if commit.checkpoint is not None:
                self._last_checkpoint = written
        self.timings["tables"] += written - started
        self.timings["checkpoint"] += time.monotonic() - written
        bound = self._tombstones.bound(commit.checkpoint)
        if bound is not None:
            delta.purge(bound, commit.through)
            self._tombstones.purged()
        return commit

    # -- Checkable ----------------------------------------------------------------------------

    def check(self) -> list[Finding]:
        """The master answers and the connector jars are there (no session is started)."""
        found: list[Finding] = []
        try:
            check_master(self.config.master, self.config.connect_timeout_s)
            found.append(Finding("ok", f"{self.name}: Spark master {self.config.master} "
                                       "reachable"))
        except DblogError as exc:
            found.append(Finding("error", exc.message, exc.fix))
        try:
            jars = connector_jars(self.config, bool(self.config.kafka))
            found.append(Finding("ok", f"{self.name}: {len(jars)} connector jar(s) found"))
        except DblogError as exc:
            found.append(Finding("error", exc.message, exc.fix))
        return found
