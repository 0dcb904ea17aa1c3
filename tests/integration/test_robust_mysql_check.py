"""Issue 16, finding 2 on a real MariaDB: what ``dblog check`` reports about the captured
tables, so that nothing is lost without a word: tables named exactly in ``source.tables``
exist, keyless tables are flagged with a key to use only when one is unique, and
``source.key_columns`` are a key."""

from __future__ import annotations

import logging
import zlib
from typing import Any

import pytest

from dblog.connectors.mysql import MysqlConnector
from dblog.spi import Finding

from .sources import Kit

pytestmark = pytest.mark.integration


@pytest.fixture()
def maria(maria_dsn: str) -> Kit:
    return Kit("mariadb", maria_dsn)


def connector(maria: Kit, **source: Any) -> MysqlConnector:
    server_id = 2000 + zlib.crc32(maria.dsn.encode()) % 1_000_000
    return MysqlConnector({"dsn": maria.dsn, "server_id": server_id, **source}, "chk")


def findings(maria: Kit, **source: Any) -> list[Finding]:
    source.setdefault("tables", [maria.table("*")])
    conn = connector(maria, **source)
    try:
        return conn.check()
    finally:
        conn.close()


def shown(found: list[Finding], level: str = "error") -> list[str]:
    return [f"{f.message} | fix: {f.fix}" for f in found if f.level == level]


def test_check_reports_exact_table_names_that_do_not_exist(
        maria: Kit, caplog: pytest.LogCaptureFixture) -> None:
    maria.execute("CREATE TABLE here (id int PRIMARY KEY)")
    tables = [maria.table("here"), maria.table("nope"), "nope2.*"]
    found = shown(findings(maria, tables=tables))
    assert len(found) == 1, found
    assert f"table {maria.table('nope')} in source.tables does not exist" in found[0]
    assert "database.table" in found[0]
    source = connector(maria, tables=tables)
    try:
        with caplog.at_level(logging.WARNING):
            source.prepare()  # run starts (a table created later is captured), with a warning
    finally:
        source.close()
    assert any(f"{maria.table('nope')} in source.tables does not exist" in r.getMessage()
               for r in caplog.records)


def test_a_keyless_table_is_flagged_and_only_a_unique_key_is_suggested(maria: Kit) -> None:
    maria.execute("CREATE TABLE logs (at int, msg text)")
    maria.execute("CREATE TABLE coded (v int, n int, code int NOT NULL, UNIQUE KEY (n), "
                  "UNIQUE KEY (code))")
    found = shown(findings(maria))
    assert len(found) == 2, found
    coded, logs = sorted(found)
    assert f"{maria.table('logs')} has no primary key" in logs, logs
    assert "events carry no key" in logs
    assert "no unique index on non-null columns" in logs and "ADD PRIMARY KEY" in logs
    # n is unique but nullable, v is merely the first column: only code is a key
    assert f"{maria.table('coded')} has no primary key" in coded, coded
    assert f"key_columns: {{\"{maria.table('coded')}\": ['code']}}" in coded, coded


def test_key_columns_are_verified_unique_and_not_null(maria: Kit) -> None:
    maria.execute("CREATE TABLE hist (tid int, v int)")
    maria.execute("INSERT INTO hist VALUES (1, 1), (1, 2), (2, 3)")
    maria.execute("CREATE TABLE holes (id int, v int)")
    maria.execute("INSERT INTO holes VALUES (1, 1), (NULL, 2)")
    maria.execute("CREATE TABLE names (name varchar(10), v int)")  # utf8mb4_general_ci
    maria.execute("INSERT INTO names VALUES ('a', 1), ('A', 2)")
    maria.execute("CREATE TABLE fine (id int, v int)")
    maria.execute("INSERT INTO fine VALUES (1, 1), (2, 2)")
    maria.execute("CREATE TABLE indexed (id int NOT NULL, v int, UNIQUE KEY (id))")
    keys = {maria.table("hist"): ["tid"], maria.table("holes"): ["id"],
            maria.table("names"): ["name"], maria.table("fine"): ["id"],
            maria.table("indexed"): ["id"]}
    found = findings(maria, key_columns=keys)
    errors = shown(found)
    for name, column in (("hist", "tid"), ("holes", "id"), ("names", "name")):
        assert any(f"source.key_columns ['{column}'] of {maria.table(name)} are not a key"
                   in e for e in errors), (name, errors)
    assert len(errors) == 3, errors
    warnings = shown(found, "warning")
    assert len(warnings) == 1, warnings
    assert f"['id'] of {maria.table('fine')} have no unique index" in warnings[0]
    assert "CREATE UNIQUE INDEX" in warnings[0]
