"""MySQL and MariaDB positions: MariaDB GTID, MySQL GTID set, binlog file and offset."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from dblog.core.positions import Ordered, compare_maps, register_position


@dataclass(frozen=True, slots=True, eq=True)
class MariadbGtid(Ordered):
    """A MariaDB GTID position (``gtid_binlog_pos`` form): the last GTID of each replication
    domain, ``domain-server-seq`` joined by commas. Under gtid_strict_mode sequence numbers grow
    per domain, so positions are ordered domain by domain (crossing positions compare false)."""

    domains: tuple[tuple[int, int, int], ...] = ()
    log_location: tuple[str, int] | None = field(default=None, compare=False, repr=False)
    """Where this commit ends in the binlog it was read from (see :meth:`at`)."""
    # the text form, made once: a transaction's events share one position, and the native
    # format writes it on every event
    _text: str = field(default="", init=False, repr=False, compare=False)
    kind: ClassVar[str] = "mariadb-gtid"

    def __post_init__(self) -> None:
        object.__setattr__(self, "_text", ",".join(f"{d}-{s}-{q}" for d, s, q in self.domains))

    @classmethod
    def parse(cls, text: str) -> MariadbGtid:
        parts = [p.strip() for p in text.split(",") if p.strip()]
        triples = []
        for part in parts:
            domain, server, seq = (int(x) for x in part.split("-"))
            triples.append((domain, server, seq))
        return cls(tuple(sorted(triples)))

    def with_gtid(self, domain: int, server: int, seq: int) -> MariadbGtid:
        rest = [t for t in self.domains if t[0] != domain]
        return MariadbGtid(tuple(sorted([*rest, (domain, server, seq)])))

    def at(self, file: str, offset: int) -> MariadbGtid:
        """The same position, knowing that its transaction ends at ``offset`` of binlog
        ``file`` (:class:`dblog.spi.LocatedPosition`). The location is no part of the
        position's identity, order or stored form: only the reader that read the commit
        knows it, and a position read back from the state store has none."""
        return MariadbGtid(self.domains, (file, offset))

    def _cmp(self, other: object) -> int | None:
        if not isinstance(other, MariadbGtid):
            return None
        return compare_maps({d: q for d, _, q in self.domains},
                             {d: q for d, _, q in other.domains})

    def __str__(self) -> str:
        return self._text

    def encode(self) -> str:
        return f"{self.kind}:{self}"


@dataclass(frozen=True, slots=True, eq=True)
class MysqlGtidSet(Ordered):
    """A MySQL GTID set (``uuid:1-5:7-9,...``); ordered by inclusion (crossing sets compare
    false). Intervals are inclusive and kept merged."""

    sets: tuple[tuple[str, tuple[tuple[int, int], ...]], ...] = ()
    log_location: tuple[str, int] | None = field(default=None, compare=False, repr=False)
    """Where this commit ends in the binlog it was read from (as :meth:`MariadbGtid.at`)."""
    kind: ClassVar[str] = "mysql-gtid"

    @classmethod
    def parse(cls, text: str) -> MysqlGtidSet:
        sets: dict[str, list[tuple[int, int]]] = {}
        for part in (p.strip() for p in text.replace("\n", "").split(",")):
            if not part:
                continue
            sid, *ranges = part.split(":")
            for r in ranges:
                low, _, high = r.partition("-")
                sets.setdefault(sid.lower(), []).append((int(low), int(high or low)))
        return cls(tuple(sorted((s, _merge(i)) for s, i in sets.items())))

    def with_gtid(self, sid: str, gno: int) -> MysqlGtidSet:
        sets = dict(self.sets)
        sets[sid] = _merge([*sets.get(sid, ()), (gno, gno)])
        return MysqlGtidSet(tuple(sorted(sets.items())))

    def at(self, file: str, offset: int) -> MysqlGtidSet:
        return MysqlGtidSet(self.sets, (file, offset))

    def _cmp(self, other: object) -> int | None:
        if not isinstance(other, MysqlGtidSet):
            return None
        if self.sets == other.sets:
            return 0
        if _contains(other, self):
            return -1
        return 1 if _contains(self, other) else None

    def __str__(self) -> str:
        return ",".join(sid + "".join(f":{lo}" if lo == hi else f":{lo}-{hi}" for lo, hi in iv)
                        for sid, iv in self.sets)

    def encode(self) -> str:
        return f"{self.kind}:{self}"


def _merge(intervals: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    merged: list[tuple[int, int]] = []
    for low, high in sorted(intervals):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return tuple(merged)


def _contains(big: MysqlGtidSet, small: MysqlGtidSet) -> bool:
    outer = dict(big.sets)
    return all(any(lo >= a and hi <= b for a, b in outer.get(sid, ()))
               for sid, iv in small.sets for lo, hi in iv)


@dataclass(frozen=True, slots=True, eq=True)
class BinlogPosition(Ordered):
    """A binlog file and byte offset (servers without GTIDs); ordered by the file's numeric
    suffix, then the offset."""

    file: str
    pos: int
    kind: ClassVar[str] = "binlog"

    @property
    def log_location(self) -> tuple[str, int]:
        """This position is its own location (:class:`dblog.spi.LocatedPosition`)."""
        return (self.file, self.pos)

    @classmethod
    def parse(cls, text: str) -> BinlogPosition:
        file, _, pos = text.rpartition(":")
        if not file:
            raise ValueError(f"not a binlog position: {text!r}")
        return cls(file, int(pos))

    def _sort_key(self) -> tuple[str, int, int]:
        stem, _, number = self.file.rpartition(".")
        return (stem, int(number) if number.isdigit() else 0, self.pos)

    def _cmp(self, other: object) -> int | None:
        if not isinstance(other, BinlogPosition):
            return None
        a, b = self._sort_key(), other._sort_key()
        return -1 if a < b else 1 if a > b else 0

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}"

    def encode(self) -> str:
        return f"{self.kind}:{self}"


for _kind in (MariadbGtid, MysqlGtidSet, BinlogPosition):
    register_position(_kind.kind, _kind.parse)
