"""A database whose encoding is not UTF-8: wal2json writes in it, and the log path decodes it
(before, every payload was decoded as UTF-8: the first non-ASCII value raised a bare
UnicodeDecodeError out of poll(), and every restart replayed the record)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from dblog.connectors.postgres import PostgresConnector
from dblog.core.model import ChangeEvent, LogItem, Op, TableId


@pytest.fixture()
def latin1_dsn(pg_admin_dsn: str) -> Iterator[str]:
    name = f"l1_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' "
                      "TEMPLATE template0")
    parts = [p for p in pg_admin_dsn.split() if not p.startswith("dbname=")]
    yield " ".join([*parts, f"dbname={name}"])
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        deadline = time.monotonic() + 30
        while True:
            admin.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                          "WHERE database = %s AND active_pid IS NOT NULL", (name,))
            try:
                for (slot,) in admin.execute("SELECT slot_name FROM pg_replication_slots "
                                             "WHERE database = %s", (name,)).fetchall():
                    admin.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                break
            except psycopg.errors.ObjectInUse:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def test_latin1_values_and_names_arrive_decoded(latin1_dsn: str) -> None:
    with psycopg.connect(latin1_dsn, autocommit=True) as conn:
        conn.execute('CREATE TABLE "tâble" (id int PRIMARY KEY, "véhicule" text)')
    connector = PostgresConnector({"dsn": latin1_dsn, "slot": "l1", "tables": ["public.tâble"]})
    connector.prepare()
    reader = connector.log_reader()
    items: list[LogItem] = []
    try:
        reader.start(None)
        with psycopg.connect(latin1_dsn, autocommit=True) as conn:
            conn.execute("""INSERT INTO "tâble" VALUES (1, 'café ÿ')""")
        for _ in range(30):
            items += reader.poll(0.2)
            if any(isinstance(i, ChangeEvent) and i.op is Op.INSERT for i in items):
                break
    finally:
        reader.close()
        connector.close()
    inserts = [(i.table, i.after) for i in items
               if isinstance(i, ChangeEvent) and i.op is Op.INSERT]
    assert inserts == [(TableId("public", "tâble"), {"id": 1, "véhicule": "café ÿ"})]
