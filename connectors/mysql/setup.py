"""Start-up checks and objects: binlog settings, rights, server id, the watermark table.

Each problem is reported with the statement or setting that fixes it; ``dblog check`` prints the
same findings without changing anything.
"""

from __future__ import annotations

from typing import Any

from dblog.core.model import TableId
from dblog.errors import FatalSourceError
from dblog.spi import Finding

from .db import DriverError, query, quote
from .errors import classify
from .flavor import Flavor

_CONF = "in my.cnf [mysqld] (then restart), or SET PERSIST on MySQL 8"


def _variables(conn: Any) -> dict[str, str]:
    rows = query(conn, "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', "
                 "'binlog_format', 'binlog_row_image', 'binlog_row_metadata', 'server_id', "
                 "'gtid_mode', 'log_bin_compress', 'binlog_transaction_compression')",
                 doing="reading the server settings")
    return {str(k).lower(): str(v) for k, v in rows}


def check_binlog(settings: dict[str, str]) -> list[Finding]:
    findings = []
    if settings.get("log_bin", "OFF").upper() != "ON":
        findings.append(Finding("error", "the binary log is off (log_bin=OFF)",
                                f"set log_bin=mysql-bin and server_id=1 {_CONF}"))
    wanted = {"binlog_format": "ROW", "binlog_row_image": "FULL", "binlog_row_metadata": "FULL"}
    for name, value in wanted.items():
        actual = settings.get(name)
        if actual is None and name == "binlog_row_metadata":
            findings.append(Finding("error", "the server has no binlog_row_metadata (MySQL "
                                    "8.0.14+ / MariaDB 10.5+ needed for column names)",
                                    "upgrade the server"))
        elif actual is not None and actual.upper() != value:
            findings.append(Finding(
                "error", f"{name} is {actual}, the binlog connector needs {value}",
                f"SET GLOBAL {name} = '{value}'; and set {name}={value} {_CONF}"))
    return findings + _compression(settings)


def _compression(settings: dict[str, str]) -> list[Finding]:
    """MariaDB's compressed events and MySQL's compressed transaction payloads are events the
    binlog library cannot read: the stream would stop on them (fastpath.py)."""
    findings = []
    for name in ("log_bin_compress", "binlog_transaction_compression"):
        if settings.get(name, "OFF").upper() == "ON":
            findings.append(Finding(
                "error", f"{name}=ON: the server writes compressed binlog events, which the "
                "binlog connector cannot read", f"SET GLOBAL {name} = OFF; and set {name}=OFF "
                f"{_CONF}"))
    return findings


def check_rights(conn: Any, flavor: Flavor) -> list[Finding]:
    grants = " ".join(str(r[0]).upper() for r in query(conn, "SHOW GRANTS",
                                                       doing="reading the user's grants"))
    if "ALL PRIVILEGES ON *.*" in grants:
        return []
    missing = [r for r in flavor.required_rights() if r not in grants]
    if not missing:
        return []
    return [Finding("error", f"the connecting user lacks {', '.join(missing)}",
                    f"GRANT {', '.join(flavor.required_rights())} ON *.* TO <dblog user>;")]


def check_server_id(conn: Any, flavor: Flavor, server_id: int, settings: dict[str, str],
                    report_name: str) -> list[Finding]:
    fix = ("set source.server_id to a number that neither the server, its replicas nor other "
           "pipelines use")
    if settings.get("server_id") == str(server_id):
        return [Finding("error", f"source.server_id {server_id} is the server's own server_id",
                        fix)]
    sql = "SHOW SLAVE HOSTS" if flavor.mariadb or flavor.version < (8, 0, 22) else \
        "SHOW REPLICAS"
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            names = [d[0].lower() for d in cur.description]
            rows = cur.fetchall()
    except DriverError:
        return []  # needs REPLICATION CLIENT / BINLOG MONITOR, reported by check_rights
    for row in rows:
        fields = dict(zip(names, row, strict=False))
        if str(fields.get("server_id")) == str(server_id) and fields.get("host") != report_name:
            return [Finding("error", f"source.server_id {server_id} is already used by the "
                            f"replica {fields.get('host')!r} of this server", fix)]
    return []


def check_server(conn: Any, flavor: Flavor, server_id: int, report_name: str) -> list[Finding]:
    settings = _variables(conn)
    return [*check_binlog(settings), *check_rights(conn, flavor),
            *check_server_id(conn, flavor, server_id, settings, report_name)]


def ensure_watermark_table(conn: Any, table: TableId, instance: str) -> None:
    """Create the database and table unless they exist, then this instance's row."""
    ident = f"{quote(table.schema)}.{quote(table.name)}"
    create = [f"CREATE DATABASE IF NOT EXISTS {quote(table.schema)}",
              f"CREATE TABLE IF NOT EXISTS {ident} (name VARCHAR(191) NOT NULL PRIMARY KEY, "
              "value VARCHAR(191) NOT NULL, updated_at TIMESTAMP(6) NOT NULL DEFAULT "
              "CURRENT_TIMESTAMP(6)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"]
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
                        "TABLE_NAME = %s", (table.schema, table.name))
            if not cur.fetchall():
                for statement in create:
                    cur.execute(statement)
            cur.execute(f"INSERT IGNORE INTO {ident} (name, value) VALUES (%s, 'init')",
                        (instance,))
    except DriverError as exc:
        error = classify(exc, f"creating the watermark table {table}")
        if error.retryable:
            raise error from exc
        raise FatalSourceError(
            error.message,
            fix=f"as an administrator run: {'; '.join(create)}; GRANT SELECT, INSERT, UPDATE "
                f"ON {ident} TO <dblog user>") from exc
