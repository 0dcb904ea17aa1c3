"""One interface over the sources the central and crash suites run against (PostgreSQL and
MariaDB): connectors, SQL access, positions, and the source's rows in canonical form."""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from dblog.connectors.mysql.positions import MariadbGtid
from dblog.connectors.postgres.positions import Lsn
from dblog.core.model import EncodedRow, TableId
from dblog.core.positions import Position

from .workload import Writers, create_schema, maria_connect

SOURCES = ["postgres", "mariadb"]


@dataclass
class Kit:
    kind: str  # "postgres" | "mariadb"
    dsn: str

    @property
    def schema(self) -> str:
        return "public" if self.kind == "postgres" else self.dsn.rsplit("/", 1)[1]

    @property
    def nextval(self) -> str:
        return "nextval('ver_seq')" if self.kind == "postgres" else "nextval(ver_seq)"

    def table(self, name: str) -> str:
        return f"{self.schema}.{name}"

    @property
    def tables(self) -> list[str]:
        return [self.table(n) for n in ("t_int", "t_comp", "t_uuid")]

    def source_config(self, name: str) -> dict[str, Any]:
        if self.kind == "postgres":
            return {"type": "postgres", "dsn": self.dsn, "slot": name, "tables": ["public.*"]}
        # explicit tables: MariaDB sequences are tables too (their rows carry no key)
        server_id = 1000 + zlib.crc32(f"{self.dsn}/{name}".encode()) % 1_000_000
        return {"type": "mariadb", "dsn": self.dsn, "server_id": server_id,
                "tables": [self.table(n) for n in ("t_int", "t_comp", "t_uuid", "t_ci")]}

    def connector(self, name: str, instance: str) -> Any:
        config = self.source_config(name)
        if self.kind == "postgres":
            from dblog.connectors.postgres import PostgresConnector

            return PostgresConnector({k: v for k, v in config.items()}, instance)
        from dblog.connectors.mysql import MysqlConnector

        return MysqlConnector(config, instance)

    def execute(self, sql: str, params: Iterable[Any] = ()) -> None:
        if self.kind == "postgres":
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute(sql, tuple(params))
            return
        conn = maria_connect(self.dsn)
        with conn.cursor() as cur:
            cur.execute(sql, tuple(params) or None)
        conn.close()

    def connect(self) -> Any:
        """An autocommit DB-API connection whose ``execute`` goes through a cursor."""
        return _Autocommit(self)

    def create_schema(self, rows: int) -> None:
        create_schema(self.dsn, rows, dialect=self.kind)

    def writers(self, rows: int, count: int = 3, seed: int = 1,
                pause_s: float = 0.0) -> Writers:
        """``count`` writer threads: each commits as fast as the server takes it, or waits
        ``pause_s`` after each transaction (outputs slower than the source keep up)."""
        return Writers(self.dsn, rows, count, seed, dialect=self.kind, pause_s=pause_s)

    def create_int_table(self, rows: int) -> None:
        """ver_seq and t_int (id, ver, v) with ``rows`` rows."""
        if self.kind == "postgres":
            self.execute("CREATE SEQUENCE ver_seq")
            self.execute("CREATE TABLE t_int (id int PRIMARY KEY, ver bigint NOT NULL, v text)")
            self.execute("INSERT INTO t_int SELECT g, nextval('ver_seq'), 'init' "
                         f"FROM generate_series(1, {rows}) g")
            return
        self.execute("CREATE SEQUENCE ver_seq")
        self.execute("CREATE TABLE t_int (id int PRIMARY KEY, ver bigint NOT NULL, v text)")
        self.execute(f"INSERT INTO t_int SELECT seq, nextval(ver_seq), 'init' FROM seq_1_to_{rows}")

    def current_position(self) -> Position:
        if self.kind == "postgres":
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
                assert row is not None
                return Lsn.parse(row[0])
        conn = maria_connect(self.dsn)
        with conn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
            text = cur.fetchone()[0]
        conn.close()
        return MariadbGtid.parse(text)

    def parse_position(self, text: str) -> Position:
        return Lsn.parse(text) if self.kind == "postgres" else MariadbGtid.parse(text)

    def chunk_reader(self) -> Any:
        if self.kind == "postgres":
            from dblog.connectors.postgres.chunks import PostgresChunkReader

            return PostgresChunkReader(self.dsn, [], {})
        from dblog.connectors.mysql.chunks import MysqlChunkReader
        from dblog.connectors.mysql.db import parse_dsn

        return MysqlChunkReader(parse_dsn(self.dsn), [], {})

    def source_rows(self, tables: Iterable[str]) -> dict[Any, dict[str, Any]]:
        """Every row of ``tables`` in the connector's canonical form, keyed like replay()."""
        reader = self.chunk_reader()
        try:
            out: dict[Any, dict[str, Any]] = {}
            for name in tables:
                info = reader.table_info(TableId.parse(name))
                for key, row in reader.read_chunk(info, None, None, 10**9).rows:
                    image = row.decode() if isinstance(row, EncodedRow) else row
                    out[((info.table.schema, info.table.name), tuple(key))] = image
            return out
        finally:
            reader.close()


class _Autocommit:
    def __init__(self, kit: Kit) -> None:
        self.kit = kit
        self.conn = psycopg.connect(kit.dsn, autocommit=True) if kit.kind == "postgres" \
            else maria_connect(kit.dsn)

    def execute(self, sql: str, params: Iterable[Any] = ()) -> None:
        if self.kit.kind == "postgres":
            self.conn.execute(sql, tuple(params))
            return
        with self.conn.cursor() as cur:
            cur.execute(sql, tuple(params) or None)

    def close(self) -> None:
        self.conn.close()


@pytest.fixture(params=SOURCES)
def kit(request: pytest.FixtureRequest) -> Kit:
    """The central and crash suites run once per source."""
    if request.param == "postgres":
        return Kit("postgres", request.getfixturevalue("pg_dsn"))
    return Kit("mariadb", request.getfixturevalue("maria_dsn"))
