"""The position guard of replica tables: a per-source total order of changes, equal on replay.

A replica row is replaced only by a change whose guard is greater than the row's stored guard
(deletes included: they leave a tombstone holding their guard). The guard is a pair of
non-negative 63-bit integers ``(major, minor)`` compared lexicographically:

* a change inside a source transaction T: ``(major(T), i)``, ``i`` = 1, 2, ... its index among
  T's emitted events (BEGIN and COMMIT not counted);
* a dump row (``read``): ``(major(H), MAX_MINOR)``, H = its high watermark's position;
* ``major`` per source (:data:`POSTGRES`, :data:`MYSQL_GTID`, :data:`MARIADB_GTID`,
  :data:`BINLOG`):

  - PostgreSQL: the end LSN of T's commit record (the COMMIT event's position). A row event's
    own LSN is where its record was written, not when T committed: a transaction that started
    earlier can write a row record before another transaction's commit and commit after it.
    Commit records are written, and decoded, in commit order. dblog's connector puts that end
    on the BEGIN event too (wal2json ``include-lsn``'s ``nextlsn``, the same ``end_lsn`` the
    COMMIT message's header carries), so :data:`POSTGRES` guards rows on arrival. For a
    connector whose BEGIN carries only T's first LSN (no order), :data:`POSTGRES_AT_COMMIT`
    holds the rows until their COMMIT (see :mod:`dblog.replica.apply`); same guard values.
  - MySQL with GTIDs: the number of GTIDs in the position after T (``uuid:1-5:7,...``). Sets
    are only partially ordered, but along one binlog stream the reader's position is the
    committed set plus each transaction's GTID, which the set never holds yet, so the count
    grows by exactly one per transaction.
  - MariaDB GTIDs: the sum of the per-domain sequence numbers of the position after T. T
    replaces its own domain's entry; under ``gtid_strict_mode`` that entry only grows, so the
    sum grows with every transaction (several domains interleave in one binlog, and neither
    domain's number alone orders them).
  - binlog file and offset (no GTIDs): the event's own end offset, ``file number * 2**32 +
    offset``. A transaction's events are written to the binlog together at commit, so
    offsets are in commit order; rows of one rows event share an offset and ``i`` orders them.

Why it is sound:

1. Total and consistent with the stream for log events: the engine forwards transactions
   whole and in commit order (I1); majors strictly grow from one transaction to the next
   (checked at run time: a source that breaks this, e.g. MariaDB without strict mode, stops
   the output with an error instead of corrupting the replica), and ``i`` orders the events
   of one transaction.
2. Identical on replay: the engine resumes at a committed position, which is a transaction
   boundary, and the source sends every later transaction again whole, with the same events
   in the same order. Commit LSNs, GTID sets (the committed set plus the same GTIDs) and
   binlog offsets are facts of the log, so ``(major, i)`` comes out the same.
3. Dump rows: a row of a chunk for key k is emitted at H only when no log event for k lies
   between L and H in the stream and the chunk SELECT saw every transaction before L that
   changed k (the window's drop rule, pending transactions included). So any log event X
   for k lies before L or after H:
   before L, ``major(X) <= major(L) < major(H)`` (PostgreSQL: X's commit precedes L's, which
   precedes H's row record); after H, ``major(X) > major(H)``. A later chunk of the same key
   has a later H. A dump row's guard is thus ordered against every change of *its key*,
   which is all a guard is ever compared with (against other keys it may not be: in
   PostgreSQL a transaction committing between H's row record and H's commit precedes the
   dump rows in the stream with a greater major).
4. So among the changes of one key, the greatest guard is the last one in the stream; a
   target that keeps, per key, the change with the greatest guard (tombstones included)
   holds the last change of the stream whatever order, repetition or replay of suffixes the
   batches came in, and never goes back to an older one.

Encodings (every target can compare them): the pair as two BIGINT columns (row-value ``>``
where the engine has it, else ``major > m OR (major = m AND minor > n)``), or
:meth:`Guard.hex` (32 lowercase hex digits; compare with a binary collation) or
:meth:`Guard.to_bytes` (16 bytes, big-endian), both ordered like the pair.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from dblog.core.positions import Position
from dblog.errors import FatalOutputError

LIMIT = 1 << 63
MAX_MINOR = LIMIT - 1
"""The minor of dump rows: after every change of the transaction with the same major."""


class Guard(NamedTuple):
    """``(major, minor)``, both in ``[0, 2**63)``; ordered as a tuple."""

    major: int
    minor: int

    def to_bytes(self) -> bytes:
        """16 bytes, big-endian: byte order equals guard order."""
        return self.major.to_bytes(8, "big") + self.minor.to_bytes(8, "big")

    def hex(self) -> str:
        """32 lowercase hex digits: string order equals guard order."""
        return f"{self.major:016x}{self.minor:016x}"

    @classmethod
    def from_bytes(cls, data: bytes) -> Guard:
        if len(data) != 16:
            raise ValueError(f"a guard is 16 bytes, not {len(data)}")
        return cls(int.from_bytes(data[:8], "big"), int.from_bytes(data[8:], "big"))

    @classmethod
    def from_hex(cls, text: str) -> Guard:
        return cls.from_bytes(bytes.fromhex(text))


class MajorFrom(str, Enum):
    """Which event of a transaction gives its major."""

    COMMIT = "commit"
    """The COMMIT event's position: the transaction's events wait for it."""
    BEGIN = "begin"
    """The BEGIN event's position."""
    EVENT = "event"
    """Each event's own position (non-decreasing inside a transaction)."""


@dataclass(frozen=True, slots=True)
class GuardScheme:
    """How one kind of source position becomes a major.

    ``name`` identifies the guard values: a replica stores it and refuses a stream whose
    scheme has another name (its guards would not compare with the stored ones).
    """

    name: str
    kind: str
    major_from: MajorFrom
    parse: Callable[[str], int]
    """The major of an encoded position's body (the text after ``kind:``)."""

    def major(self, position: Position) -> int:
        kind, _, body = position.encode().partition(":")
        if kind != self.kind:
            raise FatalOutputError(
                f"the stream's positions changed kind from {self.kind!r} to {kind!r}: the "
                f"replica's guards ({self.name}) do not compare with the new ones",
                fix="rebuild the replica: drop its tables and dump the source again")
        try:
            value = self.parse(body)
        except ValueError as exc:
            raise FatalOutputError(f"cannot read a guard from position {position.encode()!r}: "
                                   f"{exc}") from exc
        if not 0 <= value < LIMIT:
            raise FatalOutputError(f"position {position.encode()!r} gives a guard outside "
                                   "[0, 2**63)", fix="rebuild the replica")
        return value


def _lsn(body: str) -> int:
    high, _, low = body.partition("/")
    if not low:
        raise ValueError(f"not an LSN: {body!r}")
    return (int(high, 16) << 32) | int(low, 16)


def _gtid_count(body: str) -> int:
    """The number of GTIDs in a MySQL GTID set ``uuid:1-5:7,uuid2:1-3``."""
    count = 0
    for part in body.replace("\n", "").split(","):
        if not part.strip():
            continue
        _, *ranges = part.strip().split(":")
        for interval in ranges:
            low, _, high = interval.partition("-")
            count += int(high or low) - int(low) + 1
    return count


def _seq_sum(body: str) -> int:
    """The sum of the sequence numbers of a MariaDB GTID position ``0-1-5,1-2-7``."""
    return sum(int(part.strip().split("-")[2]) for part in body.split(",") if part.strip())


def _binlog_offset(body: str) -> int:
    file, _, offset = body.rpartition(":")
    number = file.rpartition(".")[2]
    index, pos = (int(number) if number.isdigit() else 0), int(offset)
    if not (0 <= pos < 1 << 32 and index < 1 << 31):
        raise ValueError(f"binlog file number or offset out of range: {body!r}")
    return (index << 32) | pos


POSTGRES = GuardScheme("postgres-commit-lsn", "lsn", MajorFrom.BEGIN, _lsn)
"""The BEGIN event's position is its transaction's commit end (dblog's wal2json connector)."""
POSTGRES_AT_COMMIT = GuardScheme("postgres-commit-lsn", "lsn", MajorFrom.COMMIT, _lsn)
"""Same guard values as :data:`POSTGRES`, for a BEGIN positioned elsewhere: rows wait for the
COMMIT (``register_scheme`` it for such a connector)."""
MYSQL_GTID = GuardScheme("mysql-gtid-count", "mysql-gtid", MajorFrom.EVENT, _gtid_count)
MARIADB_GTID = GuardScheme("mariadb-gtid-seq-sum", "mariadb-gtid", MajorFrom.EVENT, _seq_sum)
BINLOG = GuardScheme("binlog-offset", "binlog", MajorFrom.EVENT, _binlog_offset)

_SCHEMES: dict[str, GuardScheme] = {s.kind: s for s in (POSTGRES, MYSQL_GTID, MARIADB_GTID,
                                                         BINLOG)}


def register_scheme(scheme: GuardScheme) -> None:
    """The default scheme for positions of ``scheme.kind`` (a third-party connector's)."""
    _SCHEMES[scheme.kind] = scheme


def scheme_for(position: Position) -> GuardScheme:
    kind = position.encode().partition(":")[0]
    scheme = _SCHEMES.get(kind)
    if scheme is None:
        raise FatalOutputError(f"no replica guard is defined for positions of kind {kind!r}",
                               fix="register a GuardScheme for it (dblog.replica.guard)")
    return scheme


def purge_bound(scheme: GuardScheme, committed: Position, margin: int) -> Guard:
    """Tombstones whose guard is below the returned guard may be deleted.

    ``committed`` must be the engine's committed position (or older): the engine never
    replays anything before it, and every change after it in the stream is later than a
    tombstone whose major is below the position's (argument 3 of the module docstring covers
    dump rows). ``margin`` is in the scheme's major units (PostgreSQL: WAL bytes; MySQL
    GTIDs: transactions; MariaDB: sequence numbers; binlog: bytes); it covers a committed
    position that is not known exactly (e.g. taken from this output's own checkpoint, which
    may be ahead of the slowest output's).
    """
    if margin < 0:
        raise ValueError("the tombstone purge margin cannot be negative")
    return Guard(max(0, scheme.major(committed) - margin), 0)
