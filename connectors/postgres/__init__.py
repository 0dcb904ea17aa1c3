"""PostgreSQL source: wal2json (format-version 2) over streaming replication, keyset chunks.

Install with ``pip install dblog[postgres]``. See docs/sources/postgres.md for the set-up.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from pydantic import BaseModel, ConfigDict, Field, field_validator

from dblog.app.configcheck import validated
from dblog.core.model import TableId
from dblog.core.positions import Position
from dblog.errors import DblogError, FatalSourceError
from dblog.runtime.redact import RedactedRepr, register_dsn
from dblog.spi import Finding
from dblog.spi.source import LoggedImages

from . import catalog, checks, retire, setup
from .chunks import PostgresChunkReader, PostgresWatermarkWriter, connect
from .errors import DSN_FIX, classify
from .replication import PostgresLogReader
from .wal2json import Wal2JsonDecoder

__all__ = ["Finding", "PostgresConfig", "PostgresConnector"]

log = logging.getLogger("dblog.connectors.postgres")
_SLOT_NAME = re.compile(r"^[a-z0-9_]{1,63}$")


class PostgresConfig(RedactedRepr, BaseModel):
    """``source:`` section for ``type: postgres``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str = "postgres"
    dsn: str = Field(description="libpq connection string of the primary")
    slot: str = Field("dblog", description="logical replication slot (created if missing)")
    tables: list[str] = Field(default_factory=list,
                              description="captured tables as schema.table patterns; empty: all")
    key_columns: dict[str, list[str]] = Field(
        default_factory=dict, description="key to use for tables without a primary key")
    inserts_only: list[str] = Field(
        default_factory=list,
        description="schema.table patterns of tables without a key (nor replica identity) to "
                    "capture anyway: their events carry no key, their updates and deletes are "
                    "lost; any other such table refuses the start")
    watermark_table: str = "dblog.watermark"
    plugin: str = "wal2json"

    @field_validator("tables", "inserts_only")
    @classmethod
    def _tables(cls, value: list[str]) -> list[str]:
        for pattern in value:
            schema, dot, name = pattern.partition(".")
            if not dot or not schema or not name or (
                    "*" in schema.strip("*") or "*" in name.strip("*")) or (
                    schema != "*" and "*" in schema) or (name != "*" and "*" in name):
                raise ValueError(f"{pattern!r}: write schema.table, where * may stand only for "
                                 "a whole schema or table name (public.*, *.orders)")
        return value

    @field_validator("dsn")
    @classmethod
    def _dsn(cls, value: str) -> str:
        """Its password is masked everywhere from now on; a string libpq cannot parse is
        refused here, without quoting it (libpq's message quotes the part it choked on). An
        empty one is refused too: libpq reads it as "every default" (the local socket, the
        login name as user and database), which is never what a pipeline meant."""
        if not value.strip():
            raise ValueError("source.dsn is empty (an environment variable that is empty or "
                             "unset?): give the source's connection string, e.g. "
                             "host=db.example port=5432 dbname=app user=dblog")
        register_dsn(value)
        try:
            conninfo_to_dict(value)
        except psycopg.ProgrammingError:
            raise ValueError(f"not a libpq connection string: {DSN_FIX}") from None
        return value

    @field_validator("slot")
    @classmethod
    def _slot(cls, value: str) -> str:
        if not _SLOT_NAME.match(value):
            raise ValueError("slot names are 1-63 characters of a-z, 0-9 and _")
        return value


class PostgresConnector:
    """A :class:`dblog.spi.SourceConnector` for PostgreSQL 12+."""

    config_model = PostgresConfig

    def __init__(self, config: PostgresConfig | dict[str, Any], instance: str = "dblog") -> None:
        self.config = config if isinstance(config, PostgresConfig) else \
            validated(PostgresConfig, config)
        self.instance = instance
        self.watermark_table = TableId.parse(self.config.watermark_table)
        self.key_columns = {TableId.parse(t): tuple(c) for t, c in self.config.key_columns.items()}
        self._catalog: psycopg.Connection | None = None
        self._columns: dict[TableId, tuple[str, ...] | None] = {}
        self._toast_shapes: dict[TableId, catalog.ToastShape | None] = {}
        self._gone: set[TableId] = set()

    @classmethod
    def from_config(cls, raw: dict[str, Any], instance: str) -> PostgresConnector:
        return cls(PostgresConfig(**raw), instance)

    def _conn(self) -> psycopg.Connection:
        if self._catalog is None or self._catalog.closed:
            self._catalog = connect(self.config.dsn)
        return self._catalog

    def check(self) -> list[Finding]:
        """What is wrong with the source, with fixes; changes nothing."""
        conn = self._conn()
        try:
            findings = setup.check_server(conn, self.config.plugin)
            findings.extend(self._source_findings(conn))
            for table in catalog.list_tables(conn, self.config.tables, self.watermark_table):
                found = _table_findings(conn, table, self.key_columns.get(table))
                if self.config.inserts_only and catalog.matches(table, self.config.inserts_only):
                    found = [replace(f, level="warning") for f in found]  # not dumpable: known
                findings.extend(found)
        except psycopg.Error as exc:
            raise classify(exc, "checking the source") from exc
        return findings

    def retired(self) -> list[str]:
        """What ``dblog retire`` would remove (:class:`dblog.spi.source.RetirableSource`)."""
        return retire.what_goes(self._conn(), self.config.slot, self.watermark_table,
                                self.instance)

    def retire(self) -> list[str]:
        return retire.retire(self._conn(), self.config.slot, self.watermark_table,
                             self.instance)

    def logged_images(self, table: TableId) -> LoggedImages:
        """Under REPLICA IDENTITY FULL the old row is logged whole; otherwise only its key, and
        unchanged TOAST values are left out of the new row."""
        try:
            found = _replica_identity(self._conn(), table)
        except psycopg.Error as exc:
            raise classify(exc, f"reading the replica identity of {table}") from exc
        identity, toastable = found if found is not None else ("d", True)
        return LoggedImages.postgres(table, identity, toastable)

    def _source_findings(self, conn: psycopg.Connection, at_start: bool = False
                         ) -> list[Finding]:
        return checks.source_findings(conn, self.config.tables, self.key_columns,
                                      self.config.inserts_only, self.watermark_table, at_start)

    def prepare(self) -> None:
        conn = self._conn()
        try:
            errors = [f for f in setup.check_server(conn, self.config.plugin)
                      if f.level == "error"]
            if errors:
                raise FatalSourceError(errors[0].message, fix=errors[0].fix)
            _refuse_unsafe(self._source_findings(conn, at_start=True))
            setup.ensure_watermark_table(conn, self.watermark_table, self.instance)
            setup.ensure_slot(conn, self.config.slot, self.config.plugin)
        except psycopg.Error as exc:
            raise classify(exc, "preparing the source") from exc

    def _columns_of(self, table: TableId, fresh: bool) -> tuple[str, ...] | None:
        """The table's columns, cached unless ``fresh``. A table the catalog no longer has
        (dropped or renamed after its changes were logged) keeps the columns last known of it:
        None when it was never seen, and the log path emits its rows as logged."""
        if fresh or table not in self._columns:
            found = catalog.column_names(self._conn(), table)
            if found is None:
                self._warn_gone(table)
            self._columns[table] = found if found is not None else self._columns.get(table)
        return self._columns[table]

    def _toast_shape_of(self, table: TableId, fresh: bool) -> catalog.ToastShape | None:
        if fresh or table not in self._toast_shapes:
            found = catalog.toast_shape(self._conn(), table)
            self._toast_shapes[table] = found if found is not None else \
                self._toast_shapes.get(table)
        return self._toast_shapes[table]

    def _warn_gone(self, table: TableId) -> None:
        if table not in self._gone:
            self._gone.add(table)
            log.warning("%s is in the log but no longer in the catalog (dropped or renamed "
                        "since its changes were logged): its changes are emitted as logged; "
                        "an update's unchanged TOAST values are reported only for columns "
                        "known of it before", table)

    def log_reader(self) -> PostgresLogReader:
        decoder = Wal2JsonDecoder(self.instance, self.watermark_table, self._columns_of,
                                  self.key_columns, self._toast_shape_of)
        add_tables = None
        if self.config.tables:
            add_tables = [catalog.add_tables_option([*self.config.tables,
                                                     str(self.watermark_table)])]

        def verify(position: Position | None) -> None:
            try:
                setup.verify_resume(self._conn(), self.config.slot, position)
            except psycopg.Error as exc:
                raise classify(exc, "checking the replication slot") from exc

        return PostgresLogReader(self.config.dsn, self.config.slot, decoder, add_tables, verify)

    def chunk_reader(self) -> PostgresChunkReader:
        return PostgresChunkReader(self.config.dsn, self.config.tables, self.key_columns,
                                   self.watermark_table, self.instance)

    def watermark_writer(self) -> PostgresWatermarkWriter:
        return PostgresWatermarkWriter(self.config.dsn, self.watermark_table, self.instance)

    def close(self) -> None:
        if self._catalog is not None:
            self._catalog.close()
            self._catalog = None


def _replica_identity(conn: psycopg.Connection, table: TableId) -> tuple[str, bool] | None:
    """``relreplident`` of ``table`` and whether it has TOAST-able columns."""
    row = conn.execute(
        "SELECT c.relreplident, EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid "
        "AND a.attnum > 0 AND NOT a.attisdropped AND a.attstorage IN ('x', 'e')) "
        "FROM pg_class c WHERE c.oid = %s::regclass", (catalog.regclass(table),)).fetchone()
    return None if row is None else (str(row[0]), bool(row[1]))


def _refuse_unsafe(findings: list[Finding]) -> None:
    """At start: a table captured without its updates and deletes, a key that is not one, or
    missing rights stop the start (all counted, the first with its fix); warnings are logged."""
    for finding in findings:
        if finding.level == "warning":
            log.warning("%s (fix: %s)", finding.message, finding.fix)
    errors = [f for f in findings if f.level == "error"]
    if errors:
        others = f" (and {len(errors) - 1} more: dblog check lists them)" if len(errors) > 1 \
            else ""
        raise FatalSourceError(errors[0].message + others, fix=errors[0].fix)


def _table_findings(conn: psycopg.Connection, table: TableId,
                    key: tuple[str, ...] | None) -> list[Finding]:
    findings = []
    try:
        catalog.table_info(conn, table, key)
    except DblogError as exc:
        findings.append(Finding("error", exc.message, exc.fix))
    row = _replica_identity(conn, table)
    if row and row[0] != "f" and row[1]:
        identity = {"d": "DEFAULT", "n": "NOTHING", "i": "USING INDEX"}.get(row[0], row[0])
        findings.append(Finding(
            "warning", f"{table} has TOAST-able columns and REPLICA IDENTITY {identity}: updates "
            "that leave a large value unchanged arrive without it (marked 'unchanged'; a dump "
            "window re-reads such rows)", f"ALTER TABLE {table} REPLICA IDENTITY FULL;"))
    return findings
