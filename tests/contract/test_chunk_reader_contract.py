"""The ChunkReader contract (dblog.spi.ChunkReader): which keys a chunk SELECT reads, run
against every implementation. Here: the in-memory readers; tests/integration/
test_chunk_reader_contract.py runs the same tests against PostgreSQL and MariaDB.

Each source holds two tables: ``c_int`` (id: the even numbers 2..40) and ``c_comp`` (a: 1..4,
b: 'a', 'c', 'e'), so a bound can be a key that exists or one between two keys.
"""

from __future__ import annotations

import select
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from dblog.core.model import Key, TableId, TableInfo
from dblog.spi import ChunkReader, WindowChunkReader
from dblog.testing import MemoryChunkReader, MemoryDatabase, MemoryWindowChunkReader

INT_KEYS = [(i,) for i in range(2, 41, 2)]
COMP_KEYS = [(a, b) for a in range(1, 5) for b in ("a", "c", "e")]


@dataclass
class ChunkSource:
    """A reader over the two tables; ``window`` reads through ``start_chunk_window`` (a
    :class:`dblog.spi.WindowChunkReader` that writes its own watermarks) when not None."""

    reader: ChunkReader
    int_table: TableId
    comp_table: TableId
    window: WindowChunkReader | None = None

    def info(self, table: TableId) -> TableInfo:
        return self.reader.table_info(table)

    def key(self, info: TableInfo, values: tuple[Any, ...]) -> Key:
        return self.reader.parse_key(info, list(values))


def memory_source(window: bool) -> ChunkSource:
    db = MemoryDatabase()
    t_int = db.create_table("public.c_int", ["id", "v"], ["id"])
    t_comp = db.create_table("public.c_comp", ["a", "b", "v"], ["a", "b"])
    for (i,) in INT_KEYS:
        db.tables[t_int].rows[(i,)] = {"id": i, "v": "x"}
    for a, b in COMP_KEYS:
        db.tables[t_comp].rows[(a, b)] = {"a": a, "b": b, "v": "x"}
    if window:
        windowed = MemoryWindowChunkReader(db, delay=0)
        return ChunkSource(windowed, t_int, t_comp, windowed)
    return ChunkSource(MemoryChunkReader(db), t_int, t_comp)


SOURCES: dict[str, Callable[[], ChunkSource]] = {
    "memory": lambda: memory_source(False),
    "memory-window": lambda: memory_source(True),
}


@pytest.fixture(params=sorted(SOURCES))
def chunk_source(request: pytest.FixtureRequest) -> Iterator[ChunkSource]:
    source = SOURCES[request.param]()
    yield source
    source.reader.close()


def _keys(source: ChunkSource, info: TableInfo, after: Key | None, upper: Key | None,
          limit: int, inclusive: bool = False) -> list[Key]:
    rows = source.reader.read_chunk(info, after, upper, limit, inclusive).rows
    return [tuple(k) for k, _ in rows]


def _expected(source: ChunkSource, info: TableInfo, keys: list[tuple[Any, ...]]) -> list[Key]:
    return [source.key(info, k) for k in keys]


def test_a_chunk_reads_keys_after_the_last_one_in_key_order(chunk_source: ChunkSource) -> None:
    info = chunk_source.info(chunk_source.int_table)
    assert _keys(chunk_source, info, None, None, 3) == _expected(chunk_source, info, INT_KEYS[:3])
    after = chunk_source.key(info, (10,))
    assert _keys(chunk_source, info, after, None, 3) == \
        _expected(chunk_source, info, [(12,), (14,), (16,)])


def test_an_inclusive_chunk_starts_at_its_first_key(chunk_source: ChunkSource) -> None:
    info = chunk_source.info(chunk_source.int_table)
    at = chunk_source.key(info, (10,))
    assert _keys(chunk_source, info, at, None, 3, inclusive=True) == \
        _expected(chunk_source, info, [(10,), (12,), (14,)])
    between = chunk_source.key(info, (11,))  # no such key: the next one is the first
    assert _keys(chunk_source, info, between, None, 2, inclusive=True) == \
        _expected(chunk_source, info, [(12,), (14,)])


def test_the_upper_key_is_included(chunk_source: ChunkSource) -> None:
    info = chunk_source.info(chunk_source.int_table)
    low, high = chunk_source.key(info, (10,)), chunk_source.key(info, (16,))
    assert _keys(chunk_source, info, low, high, 100, inclusive=True) == \
        _expected(chunk_source, info, [(10,), (12,), (14,), (16,)])
    assert _keys(chunk_source, info, low, high, 100) == \
        _expected(chunk_source, info, [(12,), (14,), (16,)])
    assert _keys(chunk_source, info, None, chunk_source.key(info, (5,)), 100) == \
        _expected(chunk_source, info, [(2,), (4,)])
    assert _keys(chunk_source, info, high, low, 100, inclusive=True) == []  # reversed: empty


def test_composite_keys_compare_as_row_values(chunk_source: ChunkSource) -> None:
    info = chunk_source.info(chunk_source.comp_table)
    low, high = chunk_source.key(info, (2, "c")), chunk_source.key(info, (3, "c"))
    assert _keys(chunk_source, info, low, high, 100, inclusive=True) == _expected(
        chunk_source, info, [(2, "c"), (2, "e"), (3, "a"), (3, "c")])
    assert _keys(chunk_source, info, low, high, 100) == _expected(
        chunk_source, info, [(2, "e"), (3, "a"), (3, "c")])
    between = chunk_source.key(info, (2, "d"))
    assert _keys(chunk_source, info, between, None, 2, inclusive=True) == _expected(
        chunk_source, info, [(2, "e"), (3, "a")])


def test_a_window_reads_what_read_chunk_reads(chunk_source: ChunkSource) -> None:
    window = chunk_source.window
    if window is None or not window.writes_windows:
        pytest.skip("this reader does not send windows")
    for table, low, high in ((chunk_source.int_table, (10,), (16,)),
                             (chunk_source.comp_table, (2, "c"), (3, "c"))):
        info = chunk_source.info(table)
        after, upper = chunk_source.key(info, low), chunk_source.key(info, high)
        bounds: list[tuple[Key | None, Key | None]] = [
            (after, upper), (after, None), (None, upper), (None, None)]
        for lo, hi in bounds:
            for inclusive in (False, True):
                want = _keys(chunk_source, info, lo, hi, 3, inclusive)
                pending = window.start_chunk_window("L-c", "H-c", info, lo, hi, 3, inclusive)
                chunk = _collected(pending)
                assert [tuple(k) for k, _ in chunk.rows] == want, (lo, hi, inclusive)


def _collected(pending: Any) -> Any:
    for _ in range(10_000):
        chunk = pending.collect()
        if chunk is not None:
            return chunk
        select.select([pending.fileno()], [], [], 0.1)
    raise AssertionError("the window's results never came")
