"""PostgreSQL's bit(n) reaches a replica as text: the connector's metadata carries the
source's flavour, so the replica's kind is the bit string's (TEXT), not MySQL's integer."""

from __future__ import annotations

import psycopg

from dblog.connectors.postgres.catalog import table_info
from dblog.core.model import TableId
from dblog.outputs.sql_kinds import ColumnKind, Kind, kinds_of
from tests.integration.conftest import pg_dsn

__all__ = ["pg_dsn"]


def test_the_postgres_catalog_marks_its_flavour_and_bits_map_to_text(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE bits (id int PRIMARY KEY, flags bit(4), v varbit(8))")
        info = table_info(conn, TableId("public", "bits"), None)
    assert info.extra["flavour"] == "postgresql"
    kinds = kinds_of(info)
    assert kinds["flags"] == kinds["v"] == ColumnKind(Kind.TEXT)
