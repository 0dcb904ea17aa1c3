"""The MySQL connector refuses to start, with the fix spelled out, on a server it cannot
capture correctly."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from dblog.errors import FatalSourceError

from .sources import Kit
from .workload import maria_connect

if TYPE_CHECKING:
    from dblog.connectors.mysql import MysqlConnector

pytestmark = pytest.mark.integration


@pytest.fixture()
def maria(maria_dsn: str) -> Kit:
    return Kit("mariadb", maria_dsn)


def _connector(dsn: str, server_id: int = 4242, instance: str = "setup") -> MysqlConnector:
    from dblog.connectors.mysql import MysqlConnector

    return MysqlConnector({"dsn": dsn, "server_id": server_id}, instance)


def _refusal(connector: object) -> FatalSourceError:
    with pytest.raises(FatalSourceError) as info:
        connector.prepare()  # type: ignore[attr-defined]
    return info.value


@pytest.fixture()
def global_setting(maria: Kit) -> Iterator[object]:
    """Set a global server variable for one test and put it back afterwards."""
    conn = maria_connect(maria.dsn)
    saved: dict[str, object] = {}

    def set_global(name: str, value: str) -> None:
        with conn.cursor() as cur:
            cur.execute(f"SELECT @@GLOBAL.{name}")
            saved.setdefault(name, cur.fetchone()[0])
            cur.execute(f"SET GLOBAL {name} = %s", (value,))

    yield set_global
    with conn.cursor() as cur:
        for name, value in saved.items():
            cur.execute(f"SET GLOBAL {name} = %s", (value,))
    conn.close()


def test_statement_binlog_format_is_refused(maria: Kit, global_setting: object) -> None:
    global_setting("binlog_format", "MIXED")  # type: ignore[operator]
    error = _refusal(_connector(maria.dsn))
    assert "binlog_format is MIXED" in error.message
    assert "SET GLOBAL binlog_format = 'ROW'" in (error.fix or "")


def test_minimal_row_image_is_refused(maria: Kit, global_setting: object) -> None:
    global_setting("binlog_row_image", "MINIMAL")  # type: ignore[operator]
    error = _refusal(_connector(maria.dsn))
    assert "binlog_row_image is MINIMAL" in error.message
    assert "binlog_row_image = 'FULL'" in (error.fix or "")


def test_missing_replication_rights_are_refused(maria: Kit) -> None:
    user = f"u{uuid.uuid4().hex[:8]}"
    maria.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw'")
    maria.execute(f"GRANT SELECT ON *.* TO '{user}'@'%'")
    try:
        host = maria.dsn.split("@", 1)[1]
        error = _refusal(_connector(f"mysql://{user}:pw@{host}"))
        assert "lacks REPLICATION SLAVE" in error.message
        assert "GRANT REPLICATION SLAVE" in (error.fix or "")
    finally:
        maria.execute(f"DROP USER '{user}'@'%'")


def test_a_server_id_clash_is_refused(maria: Kit, tmp_path: Path) -> None:
    error = _refusal(_connector(maria.dsn, server_id=1))  # the harness server's own id
    assert "is the server's own server_id" in error.message and "server_id" in (error.fix or "")
    # a running pipeline registers as a replica with its server id; another pipeline with
    # the same id is refused, the same pipeline restarting is not
    from dblog.app.pipeline import Pipeline
    from dblog.engine import EngineSettings
    from dblog.outputs.jsonl import JsonlOutput

    first = Pipeline(_connector(maria.dsn, 4343, "first"), [JsonlOutput(
        {"path": str(tmp_path / "out.jsonl")})], state_path=str(tmp_path / "s.json"),
        settings=EngineSettings(flush_interval_s=0.1)).start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not _registered(maria, 4343):
            time.sleep(0.1)
        error = _refusal(_connector(maria.dsn, 4343, "second"))
        assert "already used by the replica 'dblog-first'" in error.message
        _connector(maria.dsn, 4343, "first").prepare()
    finally:
        first.stop()


def _registered(maria: Kit, server_id: int) -> bool:
    conn = maria_connect(maria.dsn)
    with conn.cursor() as cur:
        cur.execute("SHOW SLAVE HOSTS")
        rows = cur.fetchall()
    conn.close()
    return any(int(r[0]) == server_id for r in rows)


def test_check_reports_tables_without_a_key_and_changes_nothing(maria: Kit) -> None:
    from dblog.connectors.mysql import MysqlConnector

    maria.execute("CREATE TABLE with_key (id int PRIMARY KEY)")
    maria.execute("CREATE TABLE no_key (v int)")
    connector = MysqlConnector({"dsn": maria.dsn, "server_id": 4444,
                                "tables": [maria.table("*")]}, "check")
    try:
        findings = connector.check()
    finally:
        connector.close()
    assert [f.level for f in findings] == ["error"], findings
    assert f"{maria.table('no_key')} has no primary key" in findings[0].message
    assert "key_columns" in (findings[0].fix or "")
