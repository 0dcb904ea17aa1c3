"""The ChunkReader contract (tests/contract/test_chunk_reader_contract.py) run against the
PostgreSQL and MariaDB chunk readers, on the tables that suite describes. The PostgreSQL reader
is built with a watermark row, so its pipelined windows (``start_chunk_window``) are checked
against ``read_chunk`` too."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dblog.core.model import TableId
from tests.contract.test_chunk_reader_contract import (
    COMP_KEYS,
    INT_KEYS,
    ChunkSource,
    test_a_chunk_reads_keys_after_the_last_one_in_key_order,
    test_a_window_reads_what_read_chunk_reads,
    test_an_inclusive_chunk_starts_at_its_first_key,
    test_composite_keys_compare_as_row_values,
    test_the_upper_key_is_included,
)

from .sources import SOURCES, Kit

pytestmark = pytest.mark.integration
__all__ = [
    "test_a_chunk_reads_keys_after_the_last_one_in_key_order",
    "test_a_window_reads_what_read_chunk_reads",
    "test_an_inclusive_chunk_starts_at_its_first_key",
    "test_composite_keys_compare_as_row_values",
    "test_the_upper_key_is_included",
]


def _create(kit: Kit) -> None:
    kit.execute("CREATE TABLE c_int (id int PRIMARY KEY, v text)")
    kit.execute("CREATE TABLE c_comp (a int, b varchar(10), v text, PRIMARY KEY (a, b))")
    for (i,) in INT_KEYS:
        kit.execute("INSERT INTO c_int VALUES (%s, 'x')", (i,))
    for a, b in COMP_KEYS:
        kit.execute("INSERT INTO c_comp VALUES (%s, %s, 'x')", (a, b))


@pytest.fixture(params=SOURCES)
def chunk_source(request: pytest.FixtureRequest) -> Iterator[ChunkSource]:
    if request.param == "postgres":
        kit = Kit("postgres", request.getfixturevalue("pg_dsn"))
    else:
        kit = Kit("mariadb", request.getfixturevalue("maria_dsn"))
    _create(kit)
    t_int, t_comp = TableId(kit.schema, "c_int"), TableId(kit.schema, "c_comp")
    if kit.kind == "postgres":
        from dblog.connectors.postgres.chunks import PostgresChunkReader

        kit.execute("CREATE TABLE wm (name text PRIMARY KEY, value text NOT NULL, "
                    "updated_at timestamptz NOT NULL DEFAULT now())")
        kit.execute("INSERT INTO wm (name, value) VALUES ('c', 'init')")
        reader = PostgresChunkReader(kit.dsn, [], {}, TableId("public", "wm"), "c")
        source = ChunkSource(reader, t_int, t_comp, reader)
    else:
        source = ChunkSource(kit.chunk_reader(), t_int, t_comp)
    yield source
    source.reader.close()
