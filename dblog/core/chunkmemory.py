"""How many rows a chunk SELECT reads: ``chunk_size``, but never so many that memory grows
with it (issue 16: a dump at the largest chunk_size peaked at 12 times the memory of the
default). The cap comes from the width of the table's rows, learned from its chunks (or
estimated by the connector in ``TableInfo.extra["row_bytes"]`` before the first one).
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from dblog.core.model import EncodedRow, Key, Row, RowImage

CHUNK_MEMORY_BYTES = 4 << 20
"""About how much memory the rows of one chunk SELECT may take: the rows per chunk are
``chunk_size`` or fewer, so that memory stays bounded whatever ``chunk_size`` is (a few chunks
are in memory at once: the open window, those read ahead, the outputs' queues)."""
ROW_OVERHEAD_BYTES = 300
"""Memory per row beyond its encoded bytes (its key tuple, its event, list slots)."""
UNKNOWN_WIDTH_ROWS = 1000
"""Rows of a chunk when the width of the table's rows is not known yet."""


def chunk_rows(chunk_size: int, row_bytes: float | None) -> int:
    """Rows for the next chunk SELECT: ``chunk_size``, capped so that the chunk takes about
    CHUNK_MEMORY_BYTES at most, given rows of ``row_bytes`` encoded bytes (None: unknown)."""
    if row_bytes is None or row_bytes <= 0:
        return min(chunk_size, UNKNOWN_WIDTH_ROWS)
    return max(1, min(chunk_size, int(CHUNK_MEMORY_BYTES // (row_bytes + ROW_OVERHEAD_BYTES))))


def row_bytes(rows: Sequence[tuple[Key, RowImage]], sample: int = 64) -> float | None:
    """The mean encoded size of ``rows``, from a sample of them (None: no rows)."""
    if not rows:
        return None
    step = max(1, len(rows) // sample)
    sizes = [len(row.json) if isinstance(row, EncodedRow) else _encoded_size(row)
             for _, row in rows[::step]]
    return sum(sizes) / len(sizes)


def _encoded_size(row: Row) -> int:
    try:
        return len(orjson.dumps(row, default=str))
    except TypeError:  # a value orjson cannot encode (an int beyond 64 bits)
        return len(repr(row))
