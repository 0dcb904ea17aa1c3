"""MySQL 5.7/8 and MariaDB 10.5+ source: the binlog through mysql-replication, keyset chunks.

Install with ``pip install dblog[mysql]``. See docs/sources/mysql.md for the set-up.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dblog.app.configcheck import validated
from dblog.connectors.mysql.positions import BinlogPosition
from dblog.core.model import TableId
from dblog.core.positions import Position
from dblog.errors import FatalSourceError
from dblog.runtime.clock import SystemClock
from dblog.runtime.redact import RedactedRepr, register_dsn
from dblog.spi import Clock, Finding
from dblog.spi.source import LoggedImages

from . import catalog, checks, retire, setup
from .binlog import MysqlLogReader
from .chunks import MysqlChunkReader, MysqlWatermarkWriter
from .db import Endpoint, alive, connect, parse_dsn, query
from .decoder import BinlogDecoder
from .flavor import Flavor, detect
from .retry import with_backoff
from .startrecord import WatermarkStartRecord

__all__ = ["Finding", "MysqlConfig", "MysqlConnector"]

log = logging.getLogger("dblog.connectors.mysql")


class MysqlConfig(RedactedRepr, BaseModel):
    """``source:`` section for ``type: mysql`` (or ``mariadb``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str = "mysql"
    dsn: str = Field(description="mysql://user:password@host:port/ of the primary")
    server_id: int = Field(5401, ge=1, le=2**32 - 1,
                           description="replica server id of this pipeline; unique per server")
    tables: list[str] = Field(default_factory=list,
                              description="captured tables as database.table patterns; "
                                          "empty: all but the system databases")
    key_columns: dict[str, list[str]] = Field(
        default_factory=dict, description="key to use for tables without a primary key")
    watermark_table: str = "dblog.watermark"
    heartbeat_s: float = Field(0.02, ge=0.001, le=30,
                               description="server heartbeat period while the binlog is idle")
    reconnect_timeout_s: float = Field(
        120.0, ge=0, le=3600, description="how long a lost connection is retried (a server "
                                          "restart) before the pipeline restarts")

    @field_validator("dsn")
    @classmethod
    def _dsn(cls, value: str) -> str:
        """Its password is masked everywhere from now on."""
        register_dsn(value)
        parse_dsn(value)
        return value

    @field_validator("tables")
    @classmethod
    def _tables(cls, value: list[str]) -> list[str]:
        for pattern in value:
            schema, dot, name = pattern.partition(".")
            if not dot or not schema or not name or ("*" in schema and schema != "*") or (
                    "*" in name and name != "*"):
                raise ValueError(f"{pattern!r}: write database.table, where * may stand only "
                                 "for a whole database or table name (shop.*, *.orders)")
        return value


class MysqlConnector:
    """A :class:`dblog.spi.SourceConnector` for MySQL and MariaDB."""

    config_model = MysqlConfig

    def __init__(self, config: MysqlConfig | dict[str, Any], instance: str = "dblog",
                 clock: Clock | None = None) -> None:
        self.config = config if isinstance(config, MysqlConfig) else \
            validated(MysqlConfig, config)
        self.instance = instance
        self.clock: Clock = clock or SystemClock()
        self.endpoint: Endpoint = parse_dsn(self.config.dsn)
        self.watermark_table = TableId.parse(self.config.watermark_table)
        self.key_columns = {TableId.parse(t): tuple(c) for t, c in self.config.key_columns.items()}
        self.report_name = f"dblog-{instance}"
        self._catalog: Any = None
        self._flavor: Flavor | None = None
        self._keys: dict[TableId, tuple[str, ...]] = {}
        self._types: dict[TableId, tuple[int, dict[str, str]]] = {}
        self.schema_versions: dict[TableId, int] = {}  # bumped by DDL seen in the binlog

    @classmethod
    def from_config(cls, raw: dict[str, Any], instance: str) -> MysqlConnector:
        return cls(validated(MysqlConfig, raw), instance)

    def _conn(self) -> Any:
        """The catalog connection, opened again (with backoff) when a server restart left it
        dead: every engine run starts with ``prepare``, which comes through here."""
        if self._catalog is not None and not alive(self._catalog):
            self.close()
        if self._catalog is None:
            self._catalog = with_backoff(lambda: connect(self.endpoint), self.clock,
                                         self.config.reconnect_timeout_s,
                                         "connecting to the source")
        return self._catalog

    def flavor(self) -> Flavor:
        if self._flavor is None:
            rows = query(self._conn(), "SELECT VERSION()", doing="reading the server version")
            version = str(rows[0][0])
            gtid = None
            if "mariadb" not in version.lower():
                gtid = str(query(self._conn(), "SELECT @@GLOBAL.gtid_mode")[0][0])
            self._flavor = detect(version, gtid)
        return self._flavor

    def retired(self) -> list[str]:
        """What ``dblog retire`` would remove (:class:`dblog.spi.source.RetirableSource`)."""
        return retire.what_goes(self._conn(), self.watermark_table, self.instance)

    def retire(self) -> list[str]:
        return retire.retire(self._conn(), self.watermark_table, self.instance)

    def logged_images(self, table: TableId) -> LoggedImages:
        """Full old and new rows: the connector refuses a server without
        binlog_row_image=FULL."""
        return LoggedImages.binlog()

    def check(self) -> list[Finding]:
        """What is wrong with the source, with fixes; changes nothing. It connects once,
        without the reconnect backoff: check answers at once, run rides out a restart."""
        if self._catalog is None:
            self._catalog = connect(self.endpoint)
        conn = self._conn()
        findings = setup.check_server(conn, self.flavor(), self.config.server_id,
                                      self.report_name)
        tables = catalog.list_tables(conn, self.config.tables, self.watermark_table)
        findings.extend(checks.table_findings(conn, self.config.tables, tables,
                                              self.key_columns))
        for table in tables:
            refused = self._refused(table)
            if refused is not None:
                findings.append(Finding("error", refused.message, refused.fix))
        return findings

    def _refused(self, table: TableId) -> FatalSourceError | None:
        """The error for a captured table with a column type whose dump and log values could
        differ (see connectors/mysql/types.py), or None."""
        columns = catalog.unsupported_columns(self._conn(), table)
        if not columns:
            return None
        return FatalSourceError(
            f"table {table} has columns of types the connector cannot capture identically in "
            f"dumps and log events: {', '.join(columns)}",
            fix=f"leave {table} out of source.tables, or change those column types")

    def prepare(self) -> None:
        conn = self._conn()
        errors = [f for f in setup.check_server(conn, self.flavor(), self.config.server_id,
                                                self.report_name) if f.level == "error"]
        if errors:
            raise FatalSourceError("; ".join(e.message for e in errors),
                                   fix="; ".join(e.fix for e in errors if e.fix))
        tables = catalog.list_tables(conn, self.config.tables, self.watermark_table)
        for warning in checks.start_warnings(self.config.tables, tables):
            log.warning("%s (fix: %s)", warning.message, warning.fix)
        for table in tables:
            refused = self._refused(table)
            if refused is not None:
                raise refused
        setup.ensure_watermark_table(conn, self.watermark_table, self.instance)

    def _key_columns_of(self, table: TableId, fresh: bool) -> tuple[str, ...]:
        if fresh:
            self.schema_versions[table] = self.schema_versions.get(table, 0) + 1
        if table in self.key_columns:
            return self.key_columns[table]
        if fresh or table not in self._keys:
            rows = query(self._conn(), catalog.PK_SQL, (table.schema, table.name),
                         f"reading the primary key of {table}")
            self._keys[table] = tuple(str(r[0]) for r in rows)
        return self._keys[table]

    def _column_types_of(self, table: TableId) -> dict[str, str]:
        """The catalog's base type per column, read again after DDL of the table."""
        version = self.schema_versions.get(table, 0)
        cached = self._types.get(table)
        if cached is None or cached[0] != version:
            cached = self._types[table] = (version, catalog.column_types(self._conn(), table))
        return cached[1]

    def current_position(self) -> Position:
        flavor = self.flavor()
        sql = flavor.current_position_sql()
        if sql is not None:
            return flavor.position_from(str(query(self._conn(), sql)[0][0] or ""))
        rows = query(self._conn(), flavor.status_sql(), doing="reading the binlog position")
        if not rows:
            raise FatalSourceError("the binary log is off", fix="set log_bin and restart")
        return BinlogPosition(str(rows[0][0]), int(rows[0][1]))

    def _only_schemas(self) -> list[str] | None:
        schemas = {p.partition(".")[0] for p in self.config.tables}
        if not schemas or "*" in schemas:
            return None
        return sorted(schemas | {self.watermark_table.schema})

    def log_reader(self) -> MysqlLogReader:
        decoder = BinlogDecoder(self.instance, self.watermark_table, self.flavor(),
                                self.config.tables, self._key_columns_of, self._column_types_of)
        record = WatermarkStartRecord(self._conn, self.watermark_table, self.instance)
        return MysqlLogReader(self.endpoint, self.config.server_id, self.flavor(), decoder,
                              self.current_position, self.config.heartbeat_s,
                              self._only_schemas(), self.report_name, record, self.clock,
                              self.config.reconnect_timeout_s)

    def chunk_reader(self) -> MysqlChunkReader:
        return MysqlChunkReader(self.endpoint, self.config.tables, self.key_columns,
                                self.watermark_table, self.schema_versions)

    def watermark_writer(self) -> MysqlWatermarkWriter:
        return MysqlWatermarkWriter(self.endpoint, self.watermark_table, self.instance)

    def close(self) -> None:
        if self._catalog is not None:
            with contextlib.suppress(Exception):  # closing a dead connection may fail again
                self._catalog.close()
            self._catalog = None
