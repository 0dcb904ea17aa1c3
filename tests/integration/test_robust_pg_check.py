"""Issue 16, finding 2 on a real PostgreSQL: what ``dblog check`` and the start of ``run``
verify, so that nothing is lost without a word: tables named in ``source.tables`` exist,
keyless tables are refused unless captured inserts only, ``key_columns`` are a key, and the
role may use the watermark schema and table."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dblog.connectors.postgres import PostgresConnector
from dblog.errors import FatalSourceError
from dblog.spi import Finding

from .pgutil import read_events, wait_until
from .test_robust_pg import execute, pipeline_for

pytestmark = pytest.mark.integration


def connector(dsn: str, **source: Any) -> PostgresConnector:
    slot = "chk_" + dsn.rsplit("dbname=", 1)[-1].split()[0].lower()
    return PostgresConnector({"dsn": dsn, "slot": slot, **source}, "chk")


def findings(dsn: str, **source: Any) -> list[Finding]:
    conn = connector(dsn, **source)
    try:
        return conn.check()
    finally:
        conn.close()


def errors(found: list[Finding]) -> list[str]:
    return [f"{f.message} | fix: {f.fix}" for f in found if f.level == "error"]


def test_check_reports_exact_table_names_that_do_not_exist(
        pg_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    execute(pg_dsn, "CREATE TABLE here (id int PRIMARY KEY)")
    found = errors(findings(pg_dsn, tables=["public.here", "public.nope", "nope2.*"]))
    assert len(found) == 1 and "public.nope in source.tables does not exist" in found[0], found
    source = connector(pg_dsn, tables=["public.here", "public.nope"])
    with caplog.at_level(logging.WARNING):
        source.prepare()  # run starts (the table is captured once created), with a warning
    source.close()
    assert any("public.nope in source.tables does not exist" in r.getMessage()
               for r in caplog.records)


def test_a_keyless_table_is_refused_unless_captured_inserts_only(
        pg_dsn: str, tmp_path: Path) -> None:
    execute(pg_dsn, "CREATE TABLE keyed (id int PRIMARY KEY, v int)",
            "CREATE TABLE logs (at int, msg text)", "INSERT INTO logs VALUES (1, 'a')",
            "CREATE TABLE nothing (id int PRIMARY KEY, v int)",
            "ALTER TABLE nothing REPLICA IDENTITY NOTHING",
            "CREATE TABLE full_keyed (id int NOT NULL, v int)",
            "ALTER TABLE full_keyed REPLICA IDENTITY FULL")
    keys = {"public.full_keyed": ["id"]}
    found = errors(findings(pg_dsn, tables=["public.*"], key_columns=keys))
    assert any("updates and deletes of public.logs cannot be logged" in f for f in found), found
    assert any("updates and deletes of public.nothing cannot be logged" in f for f in found)
    assert all("full_keyed" not in f and "keyed)" not in f for f in found), found
    pipeline = pipeline_for(pg_dsn, tmp_path, key_columns=keys)
    with pytest.raises(FatalSourceError) as refused:
        pipeline.start()
    assert "cannot be logged" in refused.value.message and "inserts_only" in str(refused.value.fix)
    opted: dict[str, Any] = {"key_columns": keys,
                             "inserts_only": ["public.logs", "public.nothing"]}
    assert errors(findings(pg_dsn, tables=["public.*"], **opted)) == []
    pipeline = pipeline_for(pg_dsn, tmp_path, **opted).start()
    try:
        execute(pg_dsn, "INSERT INTO logs VALUES (2, 'b')", "UPDATE full_keyed SET v = 1",
                "INSERT INTO full_keyed VALUES (7, 0)", "UPDATE full_keyed SET v = 2",
                "DELETE FROM full_keyed", "INSERT INTO keyed VALUES (1, 1)")
        wait_until(lambda: any(e.get("table") == "keyed"
                               for e in read_events(tmp_path / "out.jsonl")), 60, "the stream")
    finally:
        pipeline.stop()
    events = [e for e in read_events(tmp_path / "out.jsonl") if e["op"] not in ("begin", "commit")]
    assert [(e["table"], e["op"], e.get("key")) for e in events] == [
        ("logs", "insert", None), ("full_keyed", "insert", [7]), ("full_keyed", "update", [7]),
        ("full_keyed", "delete", [7]), ("keyed", "insert", [1])]


def test_key_columns_that_are_not_a_key_are_refused_and_only_real_keys_suggested(
        pg_dsn: str, tmp_path: Path) -> None:
    execute(pg_dsn, "CREATE TABLE hist (tid int, aid int NOT NULL, v int)",
            "ALTER TABLE hist REPLICA IDENTITY FULL",
            "INSERT INTO hist SELECT g % 10, g, g FROM generate_series(1, 1000) g",
            "CREATE TABLE uniq (code text NOT NULL, v int)",
            "ALTER TABLE uniq REPLICA IDENTITY FULL",
            "CREATE UNIQUE INDEX ON uniq (code)")
    found = errors(findings(pg_dsn, tables=["public.*"], key_columns={"public.hist": ["tid"]}))
    assert any("['tid'] of public.hist are not a key" in f for f in found), found
    assert any("no primary key" in f and "\"public.uniq\": ['code']" in f for f in found), found
    assert not any("\"public.hist\": ['tid']" in f for f in found), found  # never suggested
    pipeline = pipeline_for(pg_dsn, tmp_path, key_columns={"public.hist": ["tid"],
                                                            "public.uniq": ["code"]})
    with pytest.raises(FatalSourceError) as refused:
        pipeline.start()
    assert "not a key" in refused.value.message
    ok = errors(findings(pg_dsn, tables=["public.*"],
                         key_columns={"public.hist": ["aid"], "public.uniq": ["code"]}))
    assert ok == []


@pytest.fixture()
def limited_role(pg_dsn: str) -> Iterator[str]:
    role = f"r_{uuid.uuid4().hex[:8]}"
    execute(pg_dsn, f"CREATE ROLE {role} LOGIN REPLICATION",
            "CREATE SCHEMA dblog", "CREATE TABLE dblog.watermark (name text PRIMARY KEY, "
            "value text NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())",
            "CREATE TABLE t (id int PRIMARY KEY)", f"GRANT SELECT ON t TO {role}")
    parts = [p for p in pg_dsn.split() if not p.startswith("user=")]
    try:
        yield " ".join([*parts, f"user={role}"])
    finally:
        execute(pg_dsn, f"DROP OWNED BY {role}", f"DROP ROLE {role}")


def test_check_verifies_the_rights_on_the_watermark_schema_and_table(
        pg_dsn: str, limited_role: str) -> None:
    role = limited_role.rsplit("user=", 1)[1]
    found = errors(findings(limited_role, tables=["public.t"]))
    assert any(f"role {role} lacks USAGE on schema dblog" in f and "GRANT USAGE ON SCHEMA"
               in f for f in found), found
    source = connector(limited_role, tables=["public.t"])
    with pytest.raises(FatalSourceError) as refused:
        source.prepare()
    source.close()
    assert "lacks USAGE" in refused.value.message and "GRANT" in str(refused.value.fix)
    execute(pg_dsn, f"GRANT USAGE ON SCHEMA dblog TO {role}",
            f"GRANT SELECT ON dblog.watermark TO {role}")
    found = errors(findings(limited_role, tables=["public.t"]))
    assert any("lacks INSERT, UPDATE on the watermark table" in f for f in found), found
    execute(pg_dsn, f"GRANT INSERT, UPDATE ON dblog.watermark TO {role}")
    assert errors(findings(limited_role, tables=["public.t"])) == []
