"""Several statements in one round trip (libpq pipeline mode), each group its own transaction.

A chunk's low watermark, SELECT and high watermark are sent together. Every group ends with a
Sync, and the server runs a group only after the previous one finished, so the three still run
as separate transactions in algorithm order: L commits before the SELECT's snapshot is taken and
H is written after the SELECT ran. Without the Syncs the server would run the whole pipeline as
one implicit transaction (L and H would then commit together), which is why psycopg's
``Connection.pipeline()`` is not used for this: it syncs only when asked, at Python cost.
"""

from __future__ import annotations

import select
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, overload

import psycopg
from psycopg import errors as pgerrors
from psycopg import pq
from psycopg.adapt import Transformer

Statement = tuple[bytes, Sequence[bytes | None] | None]
T = TypeVar("T")

_DONE = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)


class PipelineCall:
    """Groups of statements sent at once (each group, then a Sync); their results are
    collected without blocking (:meth:`collect`, for a caller that waits on other sockets too)
    or by waiting (:meth:`wait`). The connection serves nothing else until the call is done."""

    def __init__(self, conn: psycopg.Connection[Any],
                 groups: Sequence[Sequence[Statement]]) -> None:
        self.conn = conn
        self.pgconn = pgconn = conn.pgconn
        self._syncs = len(groups)
        self._results: list[pq.abc.PGresult] = []
        self._error: psycopg.Error | None = None
        pgconn.enter_pipeline_mode()
        try:
            for group in groups:
                for query, params in group:
                    pgconn.send_query_params(query, params)
                pgconn.pipeline_sync()
            pgconn.flush()
        except BaseException:
            self._syncs = 0
            self._finish()
            raise

    def fileno(self) -> int:
        return self.pgconn.socket

    def collect(self) -> list[pq.abc.PGresult] | None:
        """The statements' results in order once all are in, else None (never blocks). The
        first failed statement's error is raised; a transaction it left open is rolled back."""
        pgconn = self.pgconn
        if self._syncs:
            pgconn.flush()
            pgconn.consume_input()
        while self._syncs and not pgconn.is_busy():
            result = pgconn.get_result()
            if result is None:
                if pgconn.status == pq.ConnStatus.BAD:
                    self._syncs = 0
                    self._error = psycopg.OperationalError(str(pgconn.get_error_message()))
                continue  # the end of one statement's results
            self._take(result)
        if self._syncs:
            return None
        self._finish()
        return self._results

    def wait(self) -> list[pq.abc.PGresult]:
        while True:
            results = self.collect()
            if results is not None:
                return results
            select.select([self.fileno()], [], [])

    def _take(self, result: pq.abc.PGresult) -> None:
        status = result.status
        if status == pq.ExecStatus.PIPELINE_SYNC:
            self._syncs -= 1
        elif status in _DONE:
            self._results.append(result)
        elif self._error is None and status == pq.ExecStatus.FATAL_ERROR:
            self._error = pgerrors.error_from_result(result, encoding=_encoding(self.pgconn))
        elif self._error is None and status != pq.ExecStatus.PIPELINE_ABORTED:
            self._error = psycopg.OperationalError(f"unexpected result status {status!r}")

    def _finish(self) -> None:
        pgconn = self.pgconn
        if pgconn.pipeline_status != pq.PipelineStatus.OFF and pgconn.status == pq.ConnStatus.OK:
            pgconn.exit_pipeline_mode()
        error, self._error = self._error, None
        if error is not None:
            if pgconn.status == pq.ConnStatus.OK \
                    and pgconn.transaction_status == pq.TransactionStatus.INERROR:
                pgconn.exec_(b"ROLLBACK")
            raise error


def _encoding(pgconn: pq.abc.PGconn) -> str:
    name = (pgconn.parameter_status(b"client_encoding") or b"UTF8").decode()
    return "utf-8" if name.upper() in ("UTF8", "UTF-8") else name


def load_rows(conn: psycopg.Connection[Any], result: pq.abc.PGresult) -> list[tuple[Any, ...]]:
    """A SELECT's rows as tuples, through the connection's loaders (as a cursor would)."""
    transformer = Transformer(conn)
    transformer.set_pgresult(result)
    return transformer.load_rows(0, result.ntuples, tuple)


class LazyRows(Sequence[T]):
    """A SELECT's rows, loaded and decoded on first full use (when the engine opens the chunk's
    window) rather than when the result comes in, so the next chunk can be sent first.
    ``len()`` and the last row are ready at once (the next chunk starts after the last key)."""

    __slots__ = ("_count", "_decode", "_last", "_result", "_rows", "_transformer")

    def __init__(self, conn: psycopg.Connection[Any], result: pq.abc.PGresult,
                 decode: Callable[[Sequence[Any]], T]) -> None:
        self._transformer = Transformer(conn)
        self._transformer.set_pgresult(result)
        self._count = result.ntuples
        self._decode = decode
        self._rows: list[T] | None = None
        self._last = decode(self._transformer.load_row(self._count - 1, tuple)) \
            if self._count else None

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[T]: ...

    def __getitem__(self, index: int | slice) -> T | Sequence[T]:
        if self._rows is None and self._last is not None and index in (-1, self._count - 1):
            return self._last
        return self._all()[index]

    def __iter__(self) -> Iterator[T]:
        return iter(self._all())

    def _all(self) -> list[T]:
        rows = self._rows
        if rows is None:
            # the decoder as psycopg's row maker: one call a row, the list built in C
            rows = self._rows = self._transformer.load_rows(0, self._count, self._decode)
        return rows
