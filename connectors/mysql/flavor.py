"""Everything that differs between MariaDB and MySQL 8, in one place.

============================  ===============================  ===============================
                              MariaDB 10.5+                    MySQL 8
============================  ===============================  ===============================
GTIDs                         always on; ``domain-server-seq``  ``gtid_mode=ON``: ``uuid:1-N``
                              per domain (``gtid_binlog_pos``)  sets (``gtid_executed``); off:
                                                                binlog file and offset
position type                 :class:`MariadbGtid`             :class:`MysqlGtidSet` or
                                                                :class:`BinlogPosition`
transaction start in binlog   GTID event (no BEGIN query)      GTID event, then ``BEGIN``
JSON columns                  LONGTEXT: the text as written    binary JSON, re-serialised in
                                                                MySQL's own text form
status statement              ``SHOW MASTER STATUS``           ``SHOW BINARY LOG STATUS``
                                                                (8.2+), else ``SHOW MASTER
                                                                STATUS``
replication rights            REPLICATION SLAVE, BINLOG        REPLICATION SLAVE, REPLICATION
                              MONITOR (10.5+), SELECT           CLIENT, SELECT
============================  ===============================  ===============================
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from dblog.connectors.mysql.positions import BinlogPosition, MariadbGtid, MysqlGtidSet
from dblog.core.positions import Position

from .types import Converter, to_text


@dataclass(frozen=True)
class Flavor:
    name: str  # "mariadb" | "mysql"
    version: tuple[int, ...]
    gtid: bool

    @property
    def mariadb(self) -> bool:
        return self.name == "mariadb"

    def status_sql(self) -> str:
        if not self.mariadb and self.version >= (8, 2):
            return "SHOW BINARY LOG STATUS"
        return "SHOW MASTER STATUS"

    def current_position_sql(self) -> str | None:
        if self.mariadb:
            return "SELECT @@GLOBAL.gtid_binlog_pos"
        return "SELECT @@GLOBAL.gtid_executed" if self.gtid else None

    def position_from(self, text: str) -> Position:
        return MariadbGtid.parse(text) if self.mariadb else MysqlGtidSet.parse(text)

    def required_rights(self) -> tuple[str, ...]:
        if self.mariadb and self.version >= (10, 5):
            return ("REPLICATION SLAVE", "BINLOG MONITOR", "SELECT")
        return ("REPLICATION SLAVE", "REPLICATION CLIENT", "SELECT")

    def stream_arguments(self, position: Position) -> dict[str, Any]:
        """mysql-replication's arguments to start after ``position``."""
        if isinstance(position, MariadbGtid):
            return {"is_mariadb": True, "auto_position": str(position)}
        if isinstance(position, MysqlGtidSet):
            return {"auto_position": str(position)}
        if isinstance(position, BinlogPosition):
            return {"log_file": position.file, "log_pos": position.pos, "resume_stream": True,
                    "is_mariadb": self.mariadb}
        raise TypeError(f"not a MySQL position: {position!r}")

    def json_converter(self) -> Converter:
        """Binlog JSON values: MariaDB logs the text; MySQL 8 logs a binary document that
        mysql-replication parses into Python values."""
        return to_text if self.mariadb else mysql_json_text


def detect(version: str, gtid_mode: str | None) -> Flavor:
    numbers = tuple(int(p) for p in version.split("-")[0].split(".")[:3] if p.isdigit())
    if "mariadb" in version.lower():
        return Flavor("mariadb", numbers, gtid=True)
    return Flavor("mysql", numbers, gtid=(gtid_mode or "").upper() == "ON")


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def mysql_json_text(value: Any) -> Any:
    """MySQL 8 prints JSON with ``", "`` and ``": "`` separators and keys sorted by length,
    then bytes (its binary storage order)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(_sorted(_plain(value)), ensure_ascii=False, separators=(", ", ": "))


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (len(k.encode()), k.encode()))
        return {k: _sorted(value[k]) for k in keys}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value
