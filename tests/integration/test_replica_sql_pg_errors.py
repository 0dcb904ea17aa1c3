"""A PostgreSQL target's errors on the COPY path (psycopg's own cursor) are classified like
every other: a lock the upsert waits for past ``lock_timeout`` (55P03) is retried, not raised
as a raw psycopg error that stops the pipeline."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from dblog.core.model import ChangeEvent, ColumnInfo, Op, TableId, TableInfo
from dblog.errors import RetryableOutputError
from dblog.outputs.sql import SqlOutput
from tests.integration.conftest import pg_admin_dsn
from tests.replica_targets import pg_url
from tests.unit.test_replica_sim import lsn

__all__ = ["pg_admin_dsn"]
T = TableId("public", "docs")
INFO = TableInfo(T, (ColumnInfo("id", "integer"), ColumnInfo("v", "bigint")), ("id",))


@pytest.fixture()
def url(pg_admin_dsn: str) -> str:
    """A fresh database whose sessions give up on a lock after 300 ms."""
    name = f"r_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
        conn.execute(f"ALTER DATABASE \"{name}\" SET lock_timeout = '300ms'")
    parts = [p for p in pg_admin_dsn.split() if not p.startswith("dbname=")]
    return pg_url(" ".join([*parts, f"dbname={name}"]))


def _upsert(commit: int, value: int, seq: int) -> list[ChangeEvent]:
    return [ChangeEvent(Op.BEGIN, None, position=lsn(commit), seq=seq),
            ChangeEvent(Op.INSERT, T, (1,), None, {"id": 1, "v": value}, lsn(commit - 1),
                        seq=seq + 1),
            ChangeEvent(Op.COMMIT, None, position=lsn(commit), seq=seq + 2)]


def test_a_lock_timeout_in_the_copy_path_is_retried(url: str) -> None:
    out = SqlOutput({"type": "sql", "url": url}, tables={T: INFO}.get)
    out.bind("p", 1)
    out.open(0)
    try:
        out.write(_upsert(0x1000, 1, 1))
        out.flush()
        locker = psycopg.connect(url.replace("postgresql+psycopg", "postgresql"))
        try:
            locker.execute("LOCK TABLE docs IN ACCESS EXCLUSIVE MODE")
            out.write(_upsert(0x2000, 2, 4))
            with pytest.raises(RetryableOutputError, match="55P03"):
                out.flush()
        finally:
            locker.close()
        assert out.flush() == 6  # the retry, once the lock is gone
        assert out.live_rows(T) == {(1,): {"id": 1, "v": 2}}
    finally:
        out.close()


def test_a_read_only_target_is_retried_until_it_takes_writes(url: str) -> None:
    """A target that takes no writes for now (25006: a standby during a failover, here a
    database set read-only) is retried, naming the primary; before, fatal."""
    out = SqlOutput({"type": "sql", "url": url}, tables={T: INFO}.get)
    out.bind("p", 1)
    out.open(0)
    admin = psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True)
    database = admin.execute("SELECT current_database()").fetchone()
    assert database is not None
    try:
        admin.execute(f'ALTER DATABASE "{database[0]}" SET default_transaction_read_only = on')
        out.close()  # new sessions read the setting
        with pytest.raises(RetryableOutputError, match=r"\(code 25006\).*primary"):
            out.open(0)
        admin.execute(f'ALTER DATABASE "{database[0]}" SET default_transaction_read_only = off')
        out.close()  # the pooled sessions keep the setting they started with
        out.open(0)  # the retry, once the target takes writes
        out.write(_upsert(0x1000, 1, 1))
        assert out.flush() == 3
        assert out.live_rows(T) == {(1,): {"id": 1, "v": 1}}
    finally:
        admin.close()
        out.close()
