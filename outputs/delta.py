"""Replica tables as Delta tables through ``deltalake`` (delta-rs, no JVM); docs/outputs/delta.md.

Each source table ``schema.table`` has a Delta table at ``<path>/<table_path>`` (default
``schema.table``) with the source's columns (Arrow types: :mod:`dblog.outputs.sql_kinds`), the
guard columns and the deleted flag. Readers filter ``_dblog_deleted = false``. Each flush
plans the buffered events with the pure apply core (:mod:`dblog.replica`) and runs one guarded
MERGE per table (:mod:`dblog.outputs.delta_table`), then writes the sink checkpoint row into
the ``_dblog_checkpoint`` Delta table, every commit fenced on the leader epoch.

Delta has no transaction across tables: a crash between two tables' commits leaves some tables
ahead of the checkpoint. That is sound because every commit is guarded: the engine replays
from the checkpoint (or the state store), and the replayed changes are no-ops where they were
applied (equal guards) and applied where not; the checkpoint, the scheme and the truncate
barriers are only read from the checkpoint table, written last.

A truncate is the exception: its delete leaves no tombstones, so only its barrier refuses the
older changes a replay brings. A flush with a new barrier therefore writes the checkpoint row
with the new barriers (and the old state and seq) *before* any truncate's delete, and ``open``
deletes again below every stored barrier (a no-op once done: it covers a crash between the
row and the delete). Honouring a stored barrier is sound whoever wrote it: it is the guard of
a committed truncate of this pipeline's stream, identical on replay, so every change at or
below it precedes the truncate and is cleared by it. A deposed leader cannot store one after
its successor opened: the row is a fenced commit like the data (the successor claims the
checkpoint table before reading it), and the successor's deletes come after its claims.
"""

from __future__ import annotations

import errno
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError
from pydantic import BaseModel, ConfigDict, Field

from dblog.core.model import ChangeEvent, Key, Row, TableId, TableInfo
from dblog.errors import DblogError, FatalOutputError, RetryableOutputError
from dblog.formats.base import TableLookup, no_tables
from dblog.replica import (
    CommitBuffer,
    LeftOut,
    Plan,
    PurgeSchedule,
    ReplicaProgress,
    TablePlan,
    decoded_rows,
)
from dblog.spi import Checkpoint, Finding

from . import delta_table as dtab
from .delta_checkpoint import CheckpointTable
from .sql_kinds import DELETED, ColumnKind, add_row_kinds, kinds_of, require_info

log = logging.getLogger("dblog.outputs.delta")


class DeltaConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str = "delta"
    path: str
    """The folder holding one Delta table per source table and ``_dblog_checkpoint``."""
    table_path: str = "{schema}.{table}"
    pipeline: str | None = None
    partition_by: dict[str, list[str]] = {}
    """Per source table (``schema.table``): partition columns of a table dblog creates."""
    compact_every: int | None = None
    """Compact (OPTIMIZE) a table after this many of its MERGEs; None: never."""
    z_order: bool = False
    """Compaction Z-orders the files by the key columns (instead of bin-packing)."""
    vacuum_retention_hours: int | None = None
    """After a compaction, vacuum files unreferenced for this long; None: no vacuum."""
    tombstone_margin: int | None = None
    purge_interval_s: float = 600.0
    commit_interval_s: float = Field(10.0, ge=0)
    """A flush commits only when the last commit is this old (or commit_every events wait):
    each commit is a MERGE per table with a fixed cost, and the engine asks for a flush every
    second. Acknowledgements lag by as much; 0: every flush commits."""
    commit_idle_s: float | None = Field(1.0, ge=0)
    """A flush also commits once events wait and none arrived for this long: the end of a
    burst (a dump's last rows, a stream gone quiet) is acknowledged after this pause rather
    than up to ``commit_interval_s`` later. None: only the interval and ``commit_every``."""
    commit_every: int = Field(50_000, ge=1)
    """Commit on its own once this many events are buffered (the engine asks for a flush
    only every flush_interval_s; meanwhile the output keeps writing instead of waiting)."""


@dataclass
class DeltaReplica:
    source: TableId
    table: DeltaTable
    kinds: dict[str, ColumnKind]
    key: tuple[str, ...]
    merges: int = 0


def classify(exc: Exception, what: str) -> DblogError:
    """delta-rs errors: a lost commit race or a full/unavailable disk is retryable; a schema
    or protocol mismatch is fatal."""
    if isinstance(exc, DblogError):
        return exc
    if isinstance(exc, CommitFailedError):
        return RetryableOutputError(f"{what}: {exc}")
    code = os_error_code(exc)
    if code in (errno.ENOSPC, errno.EDQUOT):
        return RetryableOutputError(f"{what}: the disk under the Delta table is full: {exc}")
    if code == errno.EIO:
        return RetryableOutputError(f"{what}: {exc}")
    return FatalOutputError(f"{what}: {exc}", fix=dtab.path_fix(code))


_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def os_error_code(exc: Exception) -> int | None:
    """The operating system's error code of a failed file operation: an OSError's errno, or
    the code delta-rs (Rust's io::Error) puts in the message as "(os error 28)", raised as a
    DeltaError or as an OSError without errno depending on where the write failed."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno
    if isinstance(exc, OSError | DeltaError):
        match = _RUST_OS_ERROR.search(str(exc))
        return int(match.group(1)) if match else None
    return None


class DeltaOutput:
    """A :class:`dblog.spi.Output` keeping Delta replica tables (also CheckpointingOutput,
    PipelineBound, FencedOutput, DiscardingOutput)."""

    config_model = DeltaConfig

    def __init__(self, config: DeltaConfig | dict[str, Any], *, name: str | None = None,
                 tables: TableLookup | None = None) -> None:
        self.config = config if isinstance(config, DeltaConfig) else DeltaConfig(**config)
        self.name = name or f"delta:{self.config.path}"
        self.root = Path(self.config.path)
        self._lookup: TableLookup = tables or no_tables
        self.pipeline, self.epoch = self.config.pipeline or "dblog", 0
        self._fence: Callable[[], bool] | None = None
        self._replicas: dict[TableId, DeltaReplica] = {}
        self._claimed: set[Path] = set()
        """The tables claimed for this epoch (at open, or at their first use since)."""
        self._ckpt: CheckpointTable | None = None
        self._buffer = CommitBuffer(self.config.commit_every, self.config.commit_interval_s,
                                    commit_idle_s=self.config.commit_idle_s)
        self._progress = ReplicaProgress(self.name, "delete the Delta tables, then dump the "
                                                    "source again")
        self._tombstones = PurgeSchedule(self.config.tombstone_margin,
                                         self.config.purge_interval_s)
        self.merge_metrics: list[dict[str, Any]] = []
        """The metrics of the last flush's MERGEs (bench and tests read them)."""

    def bind(self, pipeline: str, epoch: int) -> None:
        self.pipeline, self.epoch = self.config.pipeline or pipeline, epoch

    def set_fence(self, may_write: Callable[[], bool]) -> None:
        self._fence = may_write

    def set_tables(self, lookup: TableLookup) -> None:
        self._lookup = lookup

    # -- the Output contract ------------------------------------------------------------------

    def open(self, committed_seq: int) -> None:
        """Claim the checkpoint table and every existing replica table for this epoch, and
        restore the scheme and truncate barriers (deleting again below each)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            ckpt = self._ckpt = CheckpointTable(self.root / "_dblog_checkpoint", self.pipeline,
                                                self.epoch)
            stored = ckpt.open()
            self._claimed = set(self._table_folders())
            tables = {path: DeltaTable(str(path)) for path in self._claimed}
            for table in tables.values():
                dtab.claim(table, self.pipeline, self.epoch)
            props = dtab.commit_properties(self.pipeline, self.epoch, committed_seq)
            for source, barrier in stored.barriers.items():  # see the module docstring
                found = tables.get(self._path(source))
                if found is not None:
                    found.delete(dtab.guard_below(barrier), commit_properties=props)
        except Exception as exc:
            raise classify(exc, f"opening {self.name}") from exc
        self._progress.restore(stored.scheme, stored.barriers, stored.checkpoint(self.pipeline),
                               committed_seq)
        self._buffer.clear()
        self._replicas = {}

    def _table_folders(self) -> list[Path]:
        return sorted(p for p in self.root.iterdir()
                      if p.name != "_dblog_checkpoint" and (p / "_delta_log").is_dir())

    def write(self, events: Sequence[ChangeEvent]) -> None:
        """Buffer ``events``; commit once ``commit_every`` are buffered. A retried call with
        the same batch (after a failed commit) does not buffer it twice."""
        if self._ckpt is None:
            raise FatalOutputError(f"{self.name} is not open")
        self._buffer.write(events, lambda: self._commit(None))

    def flush(self) -> int:
        """Commit when due (see ``commit_interval_s``); the acknowledged sequence number."""
        return self._commit(None) if self._buffer.due() else self._progress.durable

    def flush_checkpoint(self, checkpoint: Checkpoint) -> int:
        return self._commit(checkpoint) if self._buffer.due() else self._progress.durable

    def committed_checkpoint(self) -> Checkpoint | None:
        return self._progress.checkpoint

    def close(self) -> None:
        """Commit what waits for ``commit_interval_s`` (best effort: it is replayed anyway,
        from the last acknowledged state)."""
        try:
            if self._ckpt is not None and len(self._buffer):
                self._commit(None)
        except DblogError as exc:
            log.warning("%s: buffered events not committed at close: %s", self.name, exc)
        finally:
            self._replicas = {}
            self._ckpt = None

    def discard(self) -> None:
        """A deposed leader: drop what is buffered, write nothing."""
        self._buffer.clear()
        self.close()

    # -- flushing -----------------------------------------------------------------------------

    def _commit(self, checkpoint: Checkpoint | None) -> int:
        ckpt = self._ckpt
        if ckpt is None:
            raise FatalOutputError(f"{self.name} is not open")
        commit = self._progress.begin(self._buffer.events, checkpoint, self._fence)
        if commit is None:
            return self._progress.durable
        through = commit.through
        try:
            ckpt.check()
            if commit.plan.barriers != self._progress.state.barriers:  # before the deletes
                ckpt.write(None, commit.scheme, dict(commit.plan.barriers), through)
            self.merge_metrics = [self._apply(t, through) for t in commit.plan.tables]
            ckpt.write(commit.checkpoint, commit.scheme, dict(commit.plan.barriers), through)
            self._maintain(commit.checkpoint, through)
        except Exception as exc:
            raise classify(exc, f"flushing {self.name}") from exc
        self._buffer.committed()
        return self._progress.finish(commit)

    def _apply(self, plan: TablePlan, seq: int) -> dict[str, Any]:
        """One table plan: truncate, then one guarded MERGE (each a fenced commit)."""
        replica = self._replica(plan.table)
        table = replica.table
        dtab.check_epoch(table, self.pipeline, self.epoch)
        props = dtab.commit_properties(self.pipeline, self.epoch, seq)
        if plan.truncate is not None:
            table.delete(dtab.guard_below(plan.truncate), commit_properties=props)
        rows = decoded_rows(plan)
        add_row_kinds(replica.kinds, rows, lambda: self._lookup(replica.source))
        changes = dtab.with_kept(table, replica.kinds, replica.key,
                                 list(zip(plan.changes, rows, strict=True)),
                                 LeftOut(str(replica.source), f"{self.name}: {replica.source}"))
        if not changes:
            return {}
        source = dtab.batch(replica.kinds, replica.key, changes,
                            pa.schema(table.schema().to_arrow()))
        replica.merges += 1
        if dtab.beyond_stored_keys(table, replica.kinds, replica.key, source):
            return dtab.append(table, source, props)
        predicate = dtab.merge_predicate(replica.kinds, replica.key, source)
        return dtab.merge(table, source, predicate, props)

    def _replica(self, table: TableId) -> DeltaReplica:
        replica = self._replicas.get(table)
        if replica is not None:
            return replica
        info = require_info(self._lookup, table, self.name, "DeltaOutput")
        path = self._path(table)
        self._refuse_shared(table, path)
        kinds = kinds_of(info)
        partition = self.config.partition_by.get(str(table))
        opened = dtab_open(path, kinds, info.key_columns, partition, self.pipeline, self.epoch)
        if path not in self._claimed:
            # made after open (by this run, or by a deposed leader still flushing): claimed
            # before its greatest key is read, or that leader could append the keys this run
            # is about to append (blind appends do not conflict): each key twice
            dtab.claim(opened, self.pipeline, self.epoch)
            self._claimed.add(path)
        replica = self._replicas[table] = DeltaReplica(table, opened, kinds, info.key_columns)
        return replica

    def _path(self, table: TableId) -> Path:
        return self.root / self.config.table_path.format(schema=table.schema, table=table.name)

    def _refuse_shared(self, table: TableId, path: Path) -> None:
        """Refuse a second source table whose ``table_path`` is an opened one's: they would
        overwrite each other's rows where their keys meet (a template without ``{schema}``
        for tables of one name in two schemas)."""
        for other in self._replicas:
            if self._path(other) == path:
                raise FatalOutputError(
                    f"source tables {other} and {table} would share the Delta table {path}",
                    fix="set the delta output's table_path to a template that tells them "
                        "apart, e.g. \"{schema}.{table}\" (the default); then dump them again")

    def _maintain(self, covered: Checkpoint | None, seq: int) -> None:
        """Tombstone purge (by margin, every purge_interval_s) and compaction/vacuum."""
        props = dtab.commit_properties(self.pipeline, self.epoch, seq)
        every = self.config.compact_every
        for replica in self._replicas.values():
            if every is not None and replica.merges >= every:
                replica.merges = 0
                self._compact(replica)
        bound = self._tombstones.bound(covered)
        if bound is None:
            return
        for replica in self._replicas.values():
            dtab.check_epoch(replica.table, self.pipeline, self.epoch)
            replica.table.delete(f"{DELETED} AND ({dtab.guard_below(bound)})",
                                 commit_properties=props)
        self._tombstones.purged()

    def _compact(self, replica: DeltaReplica) -> None:
        table = replica.table
        if self.config.z_order:
            table.optimize.z_order(list(replica.key))
        else:
            table.optimize.compact()
        hours = self.config.vacuum_retention_hours
        if hours is not None:
            table.vacuum(hours, dry_run=False, enforce_retention_duration=False)

    def check(self) -> list[Finding]:
        """The folder is writable, and each Delta table in it is a dblog replica."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            probe = self.root / ".dblog-check"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            return [Finding("error", f"{self.name}: cannot write {self.root}: {exc}",
                            "create the folder and give the pipeline's user write access")]
        findings = [Finding("ok", f"{self.name}: {self.root} is writable")]
        for path in self._table_folders():
            table = DeltaTable(str(path))
            if dtab.KEY_PROPERTY not in table.metadata().configuration:
                findings.append(Finding("error", f"Delta table {path} is not a dblog replica",
                                        "move it away, or set table_path to other folders"))
        return findings

    # -- readers --------------------------------------------------------------------------------

    def live_rows(self, table: TableId) -> dict[Key, Row]:
        """The table as readers see it (``_dblog_deleted = false``), in canonical form."""
        replica = self._replica(table)
        replica.table.update_incremental()
        return dtab.live_rows(replica.table, replica.kinds, replica.key)


def dtab_open(path: Path, kinds: dict[str, ColumnKind], key: tuple[str, ...],
              partition: list[str] | None, pipeline: str, epoch: int) -> DeltaTable:
    """The Delta table at ``path``: created when missing, else checked."""
    if not DeltaTable.is_deltatable(str(path)):
        return DeltaTable.create(
            str(path), dtab.arrow_schema(kinds), partition_by=partition,
            configuration={dtab.KEY_PROPERTY: orjson.dumps(list(key)).decode(),
                           dtab.EPOCH_PROPERTY: str(epoch)},
            commit_properties=dtab.commit_properties(pipeline, epoch, 0),
            raise_if_key_not_exists=False)
    table = DeltaTable(str(path))
    dtab.check_table(table, kinds, key)
    return table


def read_live(config: DeltaConfig | dict[str, Any], info: TableInfo) -> dict[Key, Row]:
    """A replica table with the documented reader filter (``_dblog_deleted = false``), in the
    canonical form of the source's events; for checks and demos."""
    cfg = config if isinstance(config, DeltaConfig) else DeltaConfig(**config)
    path = Path(cfg.path) / cfg.table_path.format(schema=info.table.schema,
                                                  table=info.table.name)
    kinds = kinds_of(info)
    return dtab.live_rows(DeltaTable(str(path)), kinds, info.key_columns)


__all__ = ["DeltaConfig", "DeltaOutput", "Plan", "read_live"]
