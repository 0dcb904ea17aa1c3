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
With a Delta sink the flush covers the events up to the apply plan's ``through_seq`` (a
PostgreSQL transaction waits for its COMMIT); the Kafka sinks send the same events.

The session is started once per run when ``open`` is called (``local[*]`` by default), or is
the caller's (``SparkOutput(config, session=spark)``, dblog embedded in a Spark driver). The
output works on its own ``newSession()`` of it: the Delta transaction settings it sets per
commit and its temporary views never reach the caller's session.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dblog.core.model import ChangeEvent, TableId, TableInfo
from dblog.core.positions import decode_position
from dblog.errors import DblogError, FatalOutputError, LeadershipLost
from dblog.formats.base import TableLookup, no_tables
from dblog.replica import ApplyState, Guard, Plan, plan_batch, purge_bound, scheme_for
from dblog.spi import Checkpoint, Finding

from .spark_config import SparkConfig
from .spark_delta import SparkDeltaWriter
from .spark_kafka import SparkKafkaWriter
from .spark_session import check_classes, check_master, connector_jars, start_session
from .spark_target import classify

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
        self._pending: list[ChangeEvent] = []
        self._unsent: list[ChangeEvent] = []
        self._state = ApplyState()
        self._scheme: str | None = None
        self._checkpoint: Checkpoint | None = None
        self._durable = 0
        self._open = False
        self._last_purge = self._last_commit = time.monotonic()
        self._last_checkpoint = float("-inf")
        self._retrying: Sequence[ChangeEvent] | None = None
        self._stored_meta: tuple[str | None, dict[TableId, Guard]] = (None, {})
        """The scheme and barriers in the checkpoint row (a commit without a new checkpoint
        rewrites the row only when they changed)."""
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
        self._scheme = None if stored is None else stored.scheme
        self._state = ApplyState.restored(None, {} if stored is None else stored.barriers)
        self._stored_meta = (self._scheme, {} if stored is None else dict(stored.barriers))
        self._checkpoint = None if stored is None or stored.state is None else \
            Checkpoint(self._delta.fence.pipeline if self._delta else self.pipeline,
                       stored.epoch, stored.state)
        self._pending, self._unsent = [], []
        self._durable = committed_seq
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
        if events is not self._retrying:
            self._pending.extend(events)
            if self._kafka:
                self._unsent.extend(events)
        self._retrying = events
        if len(self._pending) >= self.config.commit_every:
            self._commit(None)
        self._retrying = None

    def flush(self) -> int:
        return self._commit(None) if self._due() else self._durable

    def flush_checkpoint(self, checkpoint: Checkpoint) -> int:
        return self._commit(checkpoint) if self._due() else self._durable

    def _due(self) -> bool:
        """Whether a flush writes now (see ``commit_interval_s``)."""
        return (len(self._pending) >= self.config.commit_every or
                time.monotonic() - self._last_commit >= self.config.commit_interval_s)

    def committed_checkpoint(self) -> Checkpoint | None:
        return self._checkpoint

    def close(self) -> None:
        """Write what waits for ``commit_interval_s`` (best effort: it is replayed anyway,
        from the last acknowledged state), then stop the session if this output started it."""
        try:
            if self._open and self._pending:
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
        self._pending, self._unsent = [], []
        self.close()

    # -- flushing -----------------------------------------------------------------------------

    def _commit(self, checkpoint: Checkpoint | None) -> int:
        if not self._open:
            raise FatalOutputError(f"{self.name} is not open")
        if not self._pending and (checkpoint is None or checkpoint == self._checkpoint):
            return self._durable
        if self._fence is not None and not self._fence():
            raise LeadershipLost(f"leadership lost: {len(self._pending)} event(s) not written "
                                 f"to {self.name}")
        started = time.monotonic()
        state, plan = self._plan()
        self.timings["plan"] += time.monotonic() - started
        through = max(self._durable, plan.through_seq if plan is not None else
                      (self._pending[-1].seq if self._pending else -1))
        covered = checkpoint if checkpoint is not None and checkpoint.seq <= through else None
        try:
            self._send_kafka(through)
            if plan is not None:
                covered = self._write_delta(plan, covered, through)
        except Exception as exc:
            raise classify(exc, f"flushing {self.name}") from exc
        self._state, self._pending, self._durable = state, [], through
        self._scheme = (plan.scheme if plan is not None else None) or self._scheme
        self._checkpoint = covered or self._checkpoint
        self._last_commit = time.monotonic()
        self.batch_seconds.append(self._last_commit - started)
        return through

    def _plan(self) -> tuple[ApplyState, Plan | None]:
        if self._delta is None:
            return self._state, None
        state, plan = plan_batch(self._state, self._pending)
        if plan.scheme is not None and self._scheme not in (None, plan.scheme):
            raise FatalOutputError(f"{self.name}: the replica's guards are {self._scheme!r}, "
                                   f"the stream's {plan.scheme!r}",
                                   fix="delete the Delta tables, then dump the source again")
        return state, plan

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

    def _write_delta(self, plan: Plan, covered: Checkpoint | None, through: int
                     ) -> Checkpoint | None:
        """MERGE the tables, then the checkpoint row when due; the checkpoint written."""
        delta = self._delta
        assert delta is not None
        delta.metrics = []
        started = time.monotonic()
        for table_plan in plan.tables:
            delta.apply(table_plan, through)
        written = time.monotonic()
        assert delta.checkpoint is not None
        meta = (plan.scheme or self._scheme, dict(plan.barriers))
        if covered is not None and \
                written - self._last_checkpoint < delta.config.checkpoint_interval_s:
            covered = None  # not due: the row keeps the last checkpoint
        if covered is not None or meta != self._stored_meta:
            delta.checkpoint.write(covered, meta[0], meta[1], through)
            self._stored_meta = meta
            self._last_checkpoint = written if covered is not None else self._last_checkpoint
        self.timings["tables"] += written - started
        self.timings["checkpoint"] += time.monotonic() - written
        self._purge(delta, covered, through)
        return covered

    def _purge(self, delta: SparkDeltaWriter, covered: Checkpoint | None, seq: int) -> None:
        margin = delta.config.tombstone_margin
        text = None if covered is None else covered.state.get("position")
        if margin is None or not isinstance(text, str) or \
                time.monotonic() - self._last_purge < delta.config.purge_interval_s:
            return
        position = decode_position(text)
        if position is None:
            return
        delta.purge(purge_bound(scheme_for(position), position, margin), seq)
        self._last_purge = time.monotonic()

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
