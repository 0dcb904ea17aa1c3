"""Issue 16, finding 2: the rows of one chunk are capped by their width, whatever chunk_size
is, and a capped chunk is never taken for the end of the table."""

from __future__ import annotations

from dblog.core.chunkmemory import CHUNK_MEMORY_BYTES, UNKNOWN_WIDTH_ROWS, chunk_rows
from dblog.testing import ListOutput, MemoryDatabase, MemoryStateStore
from tests.unit.engine_script import Run, assert_replay_equals_source, fast_settings


def test_chunk_rows_are_capped_by_width() -> None:
    assert chunk_rows(1_000_000, None) == UNKNOWN_WIDTH_ROWS
    assert chunk_rows(10, None) == 10
    assert chunk_rows(1_000_000, 100) == CHUNK_MEMORY_BYTES // 400
    assert chunk_rows(1_000_000, 10 * CHUNK_MEMORY_BYTES) == 1
    assert chunk_rows(50, 100) == 50


def test_a_dump_at_the_largest_chunk_size_reads_every_row_in_bounded_chunks() -> None:
    db = MemoryDatabase()
    table = db.create_table("public.wide", ["id", "blob"], ["id"])
    db.transaction(("insert", table, {"id": i, "blob": "x" * 2000}) for i in range(6000))
    out = ListOutput()
    run = Run(db, [out], MemoryStateStore(), settings=fast_settings(1_000_000, batch_size=5000))
    future = run.engine.request_dump(["public.wide"])
    run.go()
    dump = next(d for d in run.engine.status()["dumps"] if d["id"] == future.result(0))
    assert dump["state"] == "done"
    chunks, rows = dump["tables"][0]["chunks"], dump["tables"][0]["rows"]
    assert rows == 6000
    assert chunks >= 6000 * 2000 // CHUNK_MEMORY_BYTES  # capped: not one chunk of 6000 rows
    assert_replay_equals_source(out.events, db)
