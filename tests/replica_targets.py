"""Replica output targets for tests: the SQL output on SQLite, PostgreSQL and MariaDB, and the
Delta output, behind one small interface. Each target reads its tables back *independently of
the output* (the SQL view without tombstones, the documented Delta filter), in the canonical
form of the source's events, so a test compares what a reader of the target sees."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from deltalake import DeltaTable

from dblog.core.model import ColumnInfo, Key, Row, TableId, TableInfo
from dblog.outputs.delta import DeltaOutput
from dblog.outputs.sql import SqlOutput, make_engine
from dblog.outputs.sql_kinds import DELETED, ColumnKind, from_db, kind_of

ReplicaOutput = SqlOutput | DeltaOutput
Lookup = Callable[[TableId], TableInfo | None]
TARGETS = ["sqlite", "postgres", "mariadb", "delta"]


def pg_url(dsn: str) -> str:
    """A libpq keyword DSN (the harness's) as a SQLAlchemy URL."""
    parts = dict(p.split("=", 1) for p in dsn.split())
    return (f"postgresql+psycopg://{parts.get('user', 'postgres')}@{parts['host']}:"
            f"{parts['port']}/{parts['dbname']}")


def maria_url(dsn: str) -> str:
    """``mysql://user@host:port/db`` (the harness's) as a SQLAlchemy URL."""
    return "mysql+mysqldb://" + dsn.split("://", 1)[1] + "?charset=utf8mb4"


def static_lookup(*infos: TableInfo) -> Lookup:
    by_table = {info.table: info for info in infos}
    return by_table.get


def source_lookup(reader: Any) -> Lookup:
    """Table metadata from a source chunk reader of its own (calls serialized)."""
    lock = threading.Lock()

    def lookup(table: TableId) -> TableInfo | None:
        with lock:
            info: TableInfo = reader.table_info(table)
            return info
    return lookup


def int_info(table: TableId, *extra: str) -> TableInfo:
    """``id integer`` key, ``v bigint``, ``blob text`` (the replica simulator's rows)."""
    columns = (ColumnInfo("id", "integer"), ColumnInfo("v", "bigint"),
               ColumnInfo("blob", "text"), *(ColumnInfo(c, "text") for c in extra))
    return TableInfo(table, columns, ("id",))


class Target:
    """One replica target; ``lookup`` gives the outputs their table metadata."""

    name = "target"

    def __init__(self, lookup: Lookup) -> None:
        self.lookup = lookup
        self.outputs: list[ReplicaOutput] = []

    def config(self) -> dict[str, Any]:
        raise NotImplementedError

    def new_output(self, epoch: int = 1, pipeline: str = "contract",
                   **config: Any) -> ReplicaOutput:
        """A fresh output over the same target (as after a restart), bound to ``epoch``."""
        settings = {**self.config(), **config}
        output: ReplicaOutput = (SqlOutput(settings, tables=self.lookup)
                                 if settings["type"] == "sql"
                                 else DeltaOutput(settings, tables=self.lookup))
        output.bind(pipeline, epoch)
        self.outputs.append(output)
        return output

    def kinds(self, table: TableId) -> tuple[dict[str, ColumnKind], tuple[str, ...]]:
        info = self.lookup(table)
        assert info is not None
        return {c.name: kind_of(c.type_name) for c in info.columns}, info.key_columns

    def live(self, table: TableId) -> dict[Key, Row]:
        raise NotImplementedError

    def stored(self, table: TableId) -> dict[Key, bool]:
        """Every stored key (tombstones too) with its deleted flag."""
        raise NotImplementedError

    def close(self) -> None:
        for output in self.outputs:
            output.close()


class SqlTarget(Target):
    def __init__(self, name: str, url: str, lookup: Lookup) -> None:
        super().__init__(lookup)
        self.name, self.url = name, url
        self.engine = make_engine(url)

    def config(self) -> dict[str, Any]:
        return {"type": "sql", "url": self.url}

    def execute(self, sql: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(sa.text(sql))

    def _select(self, sql: str) -> list[dict[str, Any]]:
        try:
            with self.engine.connect() as conn:
                return [dict(r) for r in conn.execute(sa.text(sql)).mappings()]
        except sa.exc.ProgrammingError:
            return []  # not created yet
        except sa.exc.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise

    def live(self, table: TableId) -> dict[Key, Row]:
        """Through the view ``<table>_live``: tombstones hidden."""
        kinds, key = self.kinds(table)
        out: dict[Key, Row] = {}
        for record in self._select(f"SELECT * FROM {table.name}_live"):
            row = {c: from_db(kinds[c], v) for c, v in record.items() if c in kinds}
            out[tuple(row[k] for k in key)] = row
        return out

    def stored(self, table: TableId) -> dict[Key, bool]:
        kinds, key = self.kinds(table)
        records = self._select(f"SELECT * FROM {table.name}")
        return {tuple(from_db(kinds[k], r[k]) for k in key): bool(r[DELETED]) for r in records}

    def close(self) -> None:
        super().close()
        self.engine.dispose()


class DeltaTarget(Target):
    name = "delta"

    def __init__(self, path: Path, lookup: Lookup) -> None:
        super().__init__(lookup)
        self.path = path

    def config(self) -> dict[str, Any]:
        return {"type": "delta", "path": str(self.path), "commit_interval_s": 0}

    def table_path(self, table: TableId) -> Path:
        return self.path / f"{table.schema}.{table.name}"

    def _records(self, table: TableId) -> list[dict[str, Any]]:
        path = self.table_path(table)
        if not DeltaTable.is_deltatable(str(path)):
            return []
        records: list[dict[str, Any]] = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
        return records

    def live(self, table: TableId) -> dict[Key, Row]:
        """With the documented reader filter ``_dblog_deleted = false``."""
        kinds, key = self.kinds(table)
        out: dict[Key, Row] = {}
        for record in self._records(table):
            if record[DELETED]:
                continue
            row = {c: from_db(kinds[c], v) for c, v in record.items() if c in kinds}
            out[tuple(row[k] for k in key)] = row
        return out

    def stored(self, table: TableId) -> dict[Key, bool]:
        kinds, key = self.kinds(table)
        return {tuple(from_db(kinds[k], r[k]) for k in key): bool(r[DELETED])
                for r in self._records(table)}


def make_target(kind: str, request: pytest.FixtureRequest, tmp_path: Path,
                lookup: Lookup) -> Target:
    """A fresh target of ``kind`` (a database of its own on the session's servers)."""
    if kind == "sqlite":
        return SqlTarget("sqlite", f"sqlite:///{tmp_path / 'replica.db'}", lookup)
    if kind == "delta":
        return DeltaTarget(tmp_path / "delta", lookup)
    name = f"r_{uuid.uuid4().hex[:10]}"
    if kind == "postgres":
        admin = request.getfixturevalue("pg_admin_dsn")
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        parts = [p for p in admin.split() if not p.startswith("dbname=")]
        return SqlTarget("postgres", pg_url(" ".join([*parts, f"dbname={name}"])), lookup)
    admin = request.getfixturevalue("maria_admin_dsn")
    engine = sa.create_engine(maria_url(admin))
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE DATABASE `{name}`"))
    engine.dispose()
    return SqlTarget("mariadb", maria_url(admin + name), lookup)


def target_fixture(kind: str, request: pytest.FixtureRequest, tmp_path: Path,
                   lookup: Lookup) -> Iterator[Target]:
    target = make_target(kind, request, tmp_path, lookup)
    try:
        yield target
    finally:
        target.close()
