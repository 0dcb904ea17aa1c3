"""The source side of bench/kafka.py and bench/replica.py, per ``--db``: load the N-row table,
build the connector of a dblog pipeline, write the N updates (transactions of 1,000) while no
consumer runs, and read the table back.

* postgres: the table and updates of bench/run.py; a replication slot per phase, the stream's
  created before the updates.
* mariadb: the table and updates of bench/mysql.py; the dump starts at the current binlog
  position, the stream from the GTID position taken before the updates (seeded into the
  child's state, as bench/mysql_child.py does).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Protocol

DUMP_SLOT, STREAM_SLOT = "dblog_kbench_dump", "dblog_kbench_stream"


class SourceSide(Protocol):
    db: str
    dsn: str
    table: str

    def load(self, rows: int) -> None: ...

    def before_phase(self, phase: str) -> None: ...

    def write_updates(self, rows: int, slot: str | None = STREAM_SLOT) -> dict[str, Any]:
        """Write the updates (PostgreSQL: after creating ``slot``, when given); the extra
        child arguments of the stream phase."""
        ...

    def after_phase(self, phase: str) -> None: ...

    def end_position(self) -> Any:
        """The source's current log position (after the updates)."""
        ...

    def parse(self, text: str) -> Any:
        """A position as the pipeline's status shows it."""
        ...

    def chunk_reader(self) -> Any: ...

    def pipeline_connector(self, name: str) -> Any:
        """A connector for an in-process pipeline named ``name`` (a slot or server id of its
        own), capturing the benchmark table."""
        ...

    def close(self) -> None:
        """Drop what the benchmark created (slots, the table) and disconnect."""

    def disconnect(self) -> None: ...


class PostgresSide:
    db = "postgres"
    slots: tuple[str, ...] = (DUMP_SLOT, STREAM_SLOT)

    def __init__(self, dsn: str) -> None:
        import psycopg
        from run import TABLE

        self.dsn, self.table = dsn, TABLE
        self.admin = psycopg.connect(dsn, autocommit=True)
        self.updates_end: str | None = None

    def load(self, rows: int) -> None:
        from run import load_table

        load_table(self.admin, rows)
        self.admin.execute(f"VACUUM ANALYZE {self.table}")

    def before_phase(self, phase: str) -> None:
        from run import drop_slot

        drop_slot(self.admin, DUMP_SLOT if phase == "dump" else STREAM_SLOT)

    def write_updates(self, rows: int, slot: str | None = STREAM_SLOT) -> dict[str, Any]:
        from run import UPDATE_SQL, try_checkpoint

        if slot is not None:
            self.admin.execute("SELECT pg_create_logical_replication_slot(%s, 'wal2json')",
                               (slot,))
        self.admin.execute(UPDATE_SQL.format(rows=rows))
        # the end of the last update's commit record, where dblog's committed position stops:
        # read before the CHECKPOINT, whose WAL no later transaction would carry it past until
        # the next watermark heartbeat (up to heartbeat_interval_s, 10 s, added to the time)
        row = self.admin.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        assert row is not None
        self.updates_end = row[0]
        try_checkpoint(self.admin)
        return {}

    def after_phase(self, phase: str) -> None:
        self.before_phase(phase)

    def end_position(self) -> Any:
        from dblog.connectors.postgres.positions import Lsn

        if self.updates_end is not None:
            return Lsn.parse(self.updates_end)
        row = self.admin.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        return Lsn.parse(row[0])

    def parse(self, text: str) -> Any:
        from dblog.connectors.postgres.positions import Lsn

        return Lsn.parse(text)

    def chunk_reader(self) -> Any:
        from dblog.connectors.postgres.chunks import PostgresChunkReader

        return PostgresChunkReader(self.dsn, [], {})

    def pipeline_connector(self, name: str) -> Any:
        from dblog.connectors.postgres import PostgresConnector

        return PostgresConnector({"dsn": self.dsn, "tables": [self.table], "slot": name}, name)

    def close(self) -> None:
        from run import drop_slot

        with contextlib.suppress(Exception):
            for slot in self.slots:
                drop_slot(self.admin, slot, wait_s=10.0)
            self.admin.execute(f"DROP TABLE IF EXISTS {self.table}")
        self.admin.close()

    def disconnect(self) -> None:
        self.admin.close()


class MariadbSide:
    db = "mariadb"

    def __init__(self, dsn: str) -> None:
        from mysql import TABLE, _connect

        self.dsn, self.table = dsn, TABLE
        self.admin = _connect(dsn)

    def load(self, rows: int) -> None:
        from mysql import load_table

        load_table(self.admin, rows)

    def before_phase(self, phase: str) -> None:
        pass

    def write_updates(self, rows: int, slot: str | None = None) -> dict[str, Any]:
        from mysql import DATABASE, PROCEDURE_SQL, _sql

        start = str(_sql(self.admin, "SELECT @@GLOBAL.gtid_binlog_pos")[0][0])
        _sql(self.admin, f"DROP PROCEDURE IF EXISTS {DATABASE}.bench_updates")
        _sql(self.admin, PROCEDURE_SQL)
        _sql(self.admin, f"CALL {DATABASE}.bench_updates(%s)", (rows,))
        return {"start": f"mariadb-gtid:{start}"}

    def after_phase(self, phase: str) -> None:
        pass

    def end_position(self) -> Any:
        from mysql import _sql

        return self.parse(str(_sql(self.admin, "SELECT @@GLOBAL.gtid_binlog_pos")[0][0]))

    def parse(self, text: str) -> Any:
        from dblog.connectors.mysql.positions import MariadbGtid

        return MariadbGtid.parse(text)

    def chunk_reader(self) -> Any:
        from dblog.connectors.mysql.chunks import MysqlChunkReader
        from dblog.connectors.mysql.db import parse_dsn

        return MysqlChunkReader(parse_dsn(self.dsn), [], {})

    def pipeline_connector(self, name: str) -> Any:
        from dblog.connectors.mysql import MysqlConnector

        server_id = 7300 + sum(name.encode()) % 500
        return MysqlConnector({"dsn": self.dsn, "tables": [self.table], "server_id": server_id,
                               "heartbeat_s": 0.02}, name)

    def close(self) -> None:
        from mysql import DATABASE, _sql

        with contextlib.suppress(Exception):
            _sql(self.admin, f"DROP DATABASE IF EXISTS {DATABASE}")
        self.admin.close()

    def disconnect(self) -> None:
        self.admin.close()


def source_side(db: str, dsn: str) -> SourceSide:
    return PostgresSide(dsn) if db == "postgres" else MariadbSide(dsn)


def start_server(db: str) -> tuple[str, Any]:
    """A throwaway server of ``db``: (dsn, server with stop())."""
    if db == "postgres":
        from dblog.harness.postgres import start_postgres

        pg = start_postgres()
        return pg.dsn(), pg
    from dblog.harness.mariadb import start_mariadb

    maria = start_mariadb()
    return maria.dsn(), maria


def connector(args: dict[str, Any], phase: str) -> Any:
    """The child's source connector; a MariaDB stream starts from ``args['start']``."""
    name, workdir = args["name"], Path(args["workdir"])
    if args["db"] == "postgres":
        from dblog.connectors.postgres import PostgresConnector

        slot = DUMP_SLOT if phase == "dump" else STREAM_SLOT
        return PostgresConnector({"dsn": args["dsn"], "tables": [args["table"]], "slot": slot},
                                 name)
    from dblog.connectors.mysql import MysqlConnector
    from dblog.state import FileStateStore

    if phase == "stream":  # resume from the position taken before the updates
        FileStateStore(workdir / f"{args['prefix']}-state.json").save(
            {"position": args["start"], "seq": 0, "dumps": []}, None, 0)
    return MysqlConnector({"dsn": args["dsn"], "tables": [args["table"]],
                           "server_id": 7200 + (phase == "stream"), "heartbeat_s": 0.02}, name)
