"""Replica tables in a SQL database (PostgreSQL, MySQL/MariaDB, SQLite) through SQLAlchemy 2 Core.

Each source table has a replica table that stays equal to the source under replays, crashes and
failovers (docs/outputs/sql.md): batches go through the pure apply core (:mod:`dblog.replica`)
and each flush executes the resulting plan in **one target transaction** that also updates the
sink checkpoint (:mod:`dblog.outputs.sql_checkpoint`), after a fence on the leader epoch:

* :mod:`~dblog.outputs.sql_kinds`: the type mapping; :mod:`~dblog.outputs.sql_schema`: tables
  created from the source's metadata or checked, added columns, the view without tombstones;
  :mod:`~dblog.outputs.sql_keys`: the rules for key columns (collation, lengths, exact keys);
* :mod:`~dblog.outputs.sql_write`: the guarded, batched upserts per dialect;
* :mod:`~dblog.outputs.sql_errors`: driver errors classified by code.

``write`` only buffers; ``flush`` plans the buffered events from the state of the last commit,
so a failed flush (rolled back) is retried by planning the same events again. The table
metadata comes from the source (:meth:`SqlOutput.set_tables`); the lookup is called on the
output's thread, only for tables it has not seen and after a schema change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy.engine import Engine

from dblog.core.model import ChangeEvent, Key, Row, TableId, TableInfo
from dblog.errors import DblogError, FatalOutputError
from dblog.formats.base import TableLookup, no_tables
from dblog.replica import (
    Commit,
    CommitBuffer,
    PurgeSchedule,
    ReplicaProgress,
    TablePlan,
    decoded_rows,
)
from dblog.spi import Checkpoint, Finding

from . import sql_checkpoint as ckpt
from .sql_errors import REACH_FIX, translated
from .sql_kinds import DELETED, from_db, kind_of, kind_of_value, kinds_of, require_info
from .sql_schema import (
    Naming,
    ReplicaTable,
    add_columns,
    ensure,
    extra_unique,
    refresh_view,
    refusal,
)
from .sql_write import apply_table, purge, unknown_columns

_DRIVERS = {"postgresql": "postgresql+psycopg", "mysql": "mysql+mysqldb",
            "mariadb": "mariadb+mysqldb", "sqlite": "sqlite"}


class SqlConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str = "sql"
    url: str
    """SQLAlchemy URL: ``sqlite:///replica.db``, ``postgresql+psycopg://u:p@h/db``,
    ``mysql+mysqldb://u:p@h/db`` (``postgresql://`` and ``mysql://`` pick those drivers)."""
    target_schema: str | None = None
    table_name: str = "{table}"
    view_name: str = "{table}_live"
    checkpoint_table: str = "dblog_checkpoint"
    pipeline: str | None = None
    """The checkpoint row's name; default: the pipeline's (its instance name)."""
    create_tables: bool = True
    tombstone_margin: int | None = None
    """Purge tombstones this far (in guard major units) below the committed position; None
    keeps them."""
    purge_interval_s: float = 600.0
    commit_every: int = Field(20_000, ge=1)
    """Commit on its own once this many events are buffered (the engine asks for a flush
    only every flush_interval_s; meanwhile the output keeps writing instead of waiting)."""

    @field_validator("url")
    @classmethod
    def _known_dialect(cls, url: str) -> str:
        try:
            parsed = sa.make_url(url)
        except sa.exc.ArgumentError as exc:
            raise ValueError(f"url: not a SQLAlchemy URL ({exc}); e.g. sqlite:///replica.db"
                             ) from None
        if parsed.get_backend_name() not in _DRIVERS:
            raise ValueError(f"url: the sql output supports {', '.join(sorted(_DRIVERS))}, not "
                             f"{parsed.get_backend_name()!r}")
        return url


def make_engine(url: str) -> Engine:
    parsed = sa.make_url(url)
    if "+" not in parsed.drivername:
        parsed = parsed.set(drivername=_DRIVERS[parsed.get_backend_name()])
    if parsed.get_backend_name() == "sqlite":
        engine = sa.create_engine(parsed)
        sa.event.listen(engine, "connect", _sqlite_wal)
        return engine
    return sa.create_engine(parsed, pool_pre_ping=True, pool_size=2, max_overflow=2)


def _sqlite_wal(dbapi_connection: Any, _record: Any) -> None:
    """SQLite in WAL mode: readers of the replica do not block its writer (nor the other way
    round), and a commit is one fsync of the log (``synchronous=FULL`` keeps it durable)."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.close()


class SqlOutput:
    """A :class:`dblog.spi.Output` keeping replica tables (also CheckpointingOutput,
    PipelineBound, FencedOutput, DiscardingOutput, Checkable)."""

    config_model = SqlConfig

    def __init__(self, config: SqlConfig | dict[str, Any], *, name: str | None = None,
                 tables: TableLookup | None = None) -> None:
        self.config = config if isinstance(config, SqlConfig) else SqlConfig(**config)
        self.name = name or f"sql:{sa.make_url(self.config.url).render_as_string()}"
        self.naming = Naming(self.config.target_schema, self.config.table_name,
                             self.config.view_name)
        self._lookup: TableLookup = tables or no_tables
        self.pipeline, self.epoch = self.config.pipeline or "dblog", 0
        self._fence: Callable[[], bool] | None = None
        self._engine: Engine | None = None
        self._ckpt_table = ckpt.checkpoint_table(self.config.checkpoint_table,
                                                 self.config.target_schema)
        self._replicas: dict[TableId, ReplicaTable] = {}
        self._buffer = CommitBuffer(self.config.commit_every)  # every flush commits
        self._progress = ReplicaProgress(self.name, "drop the replica tables and the checkpoint "
                                                    "row, then dump the source again")
        self._tombstones = PurgeSchedule(self.config.tombstone_margin,
                                         self.config.purge_interval_s)

    # -- abilities --------------------------------------------------------------------------

    def bind(self, pipeline: str, epoch: int) -> None:
        """The pipeline (checkpoint row) and leader epoch (the fence) of this run."""
        self.pipeline, self.epoch = self.config.pipeline or pipeline, epoch

    def set_fence(self, may_write: Callable[[], bool]) -> None:
        self._fence = may_write

    def set_tables(self, lookup: TableLookup) -> None:
        """Where the source's table metadata comes from (columns, types, key)."""
        self._lookup = lookup

    @property
    def dialect(self) -> str:
        return self._require().dialect.name

    # -- the Output contract ------------------------------------------------------------------

    def open(self, committed_seq: int) -> None:
        """Connect, create the checkpoint table, claim the pipeline's row for this epoch and
        restore what the apply core needs (scheme, truncate barriers)."""
        if self._engine is None:
            self._engine = make_engine(self.config.url)
        engine = self._engine
        with translated(engine.dialect.name, f"opening {self.name}"):
            self._ckpt_table.create(engine, checkfirst=True)
            # one transaction: what it returns is what it fenced (its committer's epoch)
            stored = ckpt.claim(engine, self._ckpt_table, self.pipeline, self.epoch)
        if stored is None:
            stored = ckpt.StoredCheckpoint(self.epoch, 0, None, None)
        self._progress.restore(stored.scheme, stored.barriers, stored.checkpoint(self.pipeline),
                               committed_seq)
        self._buffer.clear()
        self._replicas = {}

    def write(self, events: Sequence[ChangeEvent]) -> None:
        """Buffer ``events``; commit once ``commit_every`` are buffered. A retried call with
        the same batch (after a failed commit) does not buffer it twice."""
        self._require()
        self._buffer.write(events, lambda: self._commit(None))

    def flush(self) -> int:
        return self._commit(None)

    def flush_checkpoint(self, checkpoint: Checkpoint) -> int:
        return self._commit(checkpoint)

    def committed_checkpoint(self) -> Checkpoint | None:
        return self._progress.checkpoint

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def discard(self) -> None:
        """A deposed leader: drop what is buffered, write nothing."""
        self._buffer.clear()
        self.close()

    # -- flushing -----------------------------------------------------------------------------

    def _commit(self, checkpoint: Checkpoint | None) -> int:
        engine = self._require()
        commit = self._progress.begin(self._buffer.events, checkpoint, self._fence)
        if commit is None:
            return self._progress.durable
        with translated(engine.dialect.name, f"flushing {self.name}"):
            work = self._prepare(commit)
            with engine.begin() as conn:
                ckpt.fence(conn, self._ckpt_table, self.pipeline, self.epoch,
                           self._values(commit))
                for table_plan, replica, rows in work:
                    apply_table(conn, replica, table_plan, rows, engine.dialect.name)
                self._purge(conn, commit.checkpoint)
        self._buffer.committed()
        return self._progress.finish(commit)

    def _values(self, commit: Commit) -> dict[str, Any]:
        covered, plan = commit.checkpoint, commit.plan
        state = None if covered is None else covered.state
        position = None if state is None else state.get("position")
        return ckpt.checkpoint_values(None if covered is None else covered.seq, state,
                                      position if isinstance(position, str) else None,
                                      plan.scheme, dict(plan.barriers))

    def _prepare(self, commit: Commit
                 ) -> list[tuple[TablePlan, ReplicaTable, list[Row | None]]]:
        """Each table plan with its replica table (created or evolved first: DDL runs outside
        the data transaction) and its decoded rows."""
        work = []
        for stale in [r for r in self._replicas.values() if r.view_stale]:
            refresh_view(self._require(), stale)  # its rebuild failed after the ALTER TABLE
        for table_plan in commit.plan.tables:
            replica = self._replica(table_plan.table)
            if table_plan.schema:
                self._evolve(replica, {})
            rows = decoded_rows(table_plan)
            unknown = unknown_columns(replica, rows)
            if unknown:
                self._evolve(replica, unknown)
            work.append((table_plan, replica, rows))
        return work

    def _replica(self, table: TableId) -> ReplicaTable:
        replica = self._replicas.get(table)
        if replica is None:
            info = require_info(self._lookup, table, self.name, "SqlOutput")
            self.naming.refuse_shared(table, self._replicas, self.dialect)
            replica = self._replicas[table] = ensure(self._require(), info, self.naming,
                                                     self.config.create_tables)
        return replica

    def _evolve(self, replica: ReplicaTable, seen: dict[str, Any]) -> None:
        """Add the columns the source has now (its metadata, else ``seen`` values' kinds)."""
        info = self._lookup(replica.source)
        known = kinds_of(info) if info is not None else {}
        added = {c: k for c, k in known.items() if c not in replica.kinds}
        for column, value in seen.items():
            if column not in replica.kinds and column not in added:
                added[column] = kind_of_value(value)
        if added:
            add_columns(self._require(), replica, added)

    def _purge(self, conn: sa.Connection, covered: Checkpoint | None) -> None:
        bound = self._tombstones.bound(covered)
        if bound is None:
            return
        for replica in self._replicas.values():
            purge(conn, replica, bound)
        self._tombstones.purged()

    def _require(self) -> Engine:
        if self._engine is None:
            raise FatalOutputError(f"{self.name} is not open")
        return self._engine

    # -- readers and check --------------------------------------------------------------------

    def live_rows(self, table: TableId) -> dict[Key, Row]:
        """The replica of ``table`` as readers see it (its view: tombstones hidden), in the
        canonical form of the source's events."""
        replica = self._replica(table)
        stored = replica.table
        query = sa.select(*(stored.c[c] for c in replica.kinds)).where(
            sa.not_(stored.c[DELETED]))
        with self._require().connect() as conn:
            records = conn.execute(query).mappings().all()
        out: dict[Key, Row] = {}
        for record in records:
            row = {c: from_db(k, record[c]) for c, k in replica.kinds.items()}
            out[tuple(row[k] for k in replica.key)] = row
        return out

    def check(self) -> list[Finding]:
        """Reachability, and the existing replica tables' unique constraints: the primary
        key must be the only unique constraint a replica upsert relies on."""
        return self._checked(lambda engine, inspector, names: [
            Finding("ok", f"{self.name}: connected ({engine.dialect.name})"),
            *self._unique_findings(inspector, names)])

    def check_tables(self, tables: Iterable[TableInfo]) -> list[Finding]:
        """For each of ``tables`` (the captured tables' metadata) whose replica table exists,
        what :meth:`open`'s first use of it would refuse, with the same message and fix (a
        key column whose collation merges keys, a NUMERIC key for an unconstrained numeric,
        another key, a type that cannot hold the values, ...): an error each. Nothing for a
        table not created yet (unless ``create_tables`` is false); unique constraints are
        :meth:`check`'s."""
        infos = list(tables)

        def found(engine: Engine, inspector: Any, _names: list[str]) -> list[Finding]:
            refused = [refusal(engine, inspector, info, self.naming, self.config.create_tables)
                       for info in infos]
            errors = [Finding("error", e.message, e.fix) for e in refused if e is not None]
            return errors or [Finding("ok", f"{self.name}: the replica tables of the "
                                      f"{len(infos)} captured table(s) that exist can be used")]
        return self._checked(found)

    def _checked(self, checks: Callable[[Engine, Any, list[str]], list[Finding]]
                 ) -> list[Finding]:
        """``checks`` on the target (its engine, an inspector, the table names), on this
        output's engine or one of its own; an error finding when the target fails."""
        engine = self._engine or make_engine(self.config.url)
        try:
            with translated(engine.dialect.name, f"checking {self.name}"):
                inspector = sa.inspect(engine)
                return checks(engine, inspector,
                              inspector.get_table_names(schema=self.config.target_schema))
        except FatalOutputError as exc:
            return [Finding("error", exc.message, exc.fix)]
        except DblogError as exc:  # a retryable error (its message names this output)
            return [Finding("error", exc.message, exc.fix or REACH_FIX)]
        except Exception as exc:  # still a failed check
            return [Finding("error", f"{self.name}: {exc}", REACH_FIX)]
        finally:
            if engine is not self._engine:
                engine.dispose()

    def _unique_findings(self, inspector: Any, names: list[str]) -> list[Finding]:
        schema = self.config.target_schema
        bad = []
        for name in names:
            columns = {c["name"] for c in inspector.get_columns(name, schema=schema)}
            if DELETED not in columns:
                continue  # not a replica table
            primary = inspector.get_pk_constraint(name, schema=schema)["constrained_columns"]
            extra = extra_unique(inspector, name, schema, primary)
            if extra:
                bad.append(Finding("error", f"replica table {name} has unique constraints "
                                   f"besides its primary key: {extra}",
                                   f"drop {', '.join(extra)} on the replica"))
        rule = Finding("ok", "replica upserts rely on the primary key alone: it must be the "
                       "only unique constraint of each replica table (checked at start)")
        return bad or [rule]


def read_live(config: SqlConfig | dict[str, Any], info: TableInfo) -> dict[Key, Row]:
    """A replica table as its readers see it (the view without tombstones), in the canonical
    form of the source's events; for checks and demos, without opening an output."""
    cfg = config if isinstance(config, SqlConfig) else SqlConfig(**config)
    engine = make_engine(cfg.url)
    try:
        _, view = Naming(cfg.target_schema, cfg.table_name, cfg.view_name).names(
            info.table, engine.dialect.name)
        kinds = kinds_of(info)
        live = sa.table(view, *(sa.column(c) for c in kinds), schema=cfg.target_schema)
        with engine.connect() as conn:
            records = conn.execute(sa.select(live)).mappings().all()
    finally:
        engine.dispose()
    rows = [{c: from_db(k, r[c]) for c, k in kinds.items()} for r in records]
    return {tuple(row[k] for k in info.key_columns): row for row in rows}


__all__ = ["SqlConfig", "SqlOutput", "kind_of", "read_live"]
