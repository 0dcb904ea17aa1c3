"""A simulated source for the replica apply core, the reference replay, and the delivery
harness (imported by the other test_replica_* modules; its own tests check the simulator).

The source writes transactions and dump chunks into one stream the way the engine emits them:
BEGIN, changes, COMMIT per transaction, in commit order; a chunk's rows at its high watermark
H, minus the keys changed between L and H (a truncate of the table in the window discards the
chunk). Positions follow each flavour's log:

* ``pg``: a row's position is its own record's LSN, which may lie before the previous
  transaction's commit (transactions overlap); BEGIN and COMMIT carry the commit end (as
  dblog's connector positions them); a chunk's rows carry H's row record LSN, and
  transactions may commit between that record and H's commit. ``pg-first-lsn``: the same
  with BEGIN at the transaction's first LSN (replicas then use ``POSTGRES_AT_COMMIT``).
* ``mysql-gtid``: every event of a transaction carries the GTID set after it (two server
  UUIDs); ``mariadb``: the GTID position after it (two domains, sequence gaps);
  ``binlog``: each event its end offset (rows of one rows event share it; files rotate).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgspec
import orjson

from dblog.core.model import ChangeEvent, EncodedRow, Key, Op, Row, TableId
from dblog.replica import (
    LIMIT,
    POSTGRES_AT_COMMIT,
    ApplyState,
    Guard,
    GuardScheme,
    MemoryReplica,
    Plan,
    RowChange,
    StoredRow,
    plan_batch,
    purge_bound,
    scheme_for,
)

FLAVOURS = ("pg", "pg-first-lsn", "mysql-gtid", "mariadb", "binlog")
TABLES = (TableId("s", "a"), TableId("s", "b"))
KEYS = 6
U1, U2 = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "8a94f357-aab4-11df-86ab-c80aa9429562"


@dataclass(frozen=True, order=True)
class Pos:
    """A source position as the engine hands it out (only ``encode`` matters here)."""

    text: str
    kind: ClassVar[str] = "simulated"  # the real kind is the encoded prefix

    def encode(self) -> str:
        return self.text


def lsn(value: int) -> Pos:
    return Pos(f"lsn:{value >> 32:X}/{value & 0xFFFFFFFF:X}")


class Log:
    """Positions for one flavour: transactions, watermark transactions, dump rows."""

    def __init__(self, flavour: str, rnd: random.Random) -> None:
        self.flavour, self.rnd = flavour, rnd
        self.lsn = 0x16_0000_0000
        self.gtids = [3, 0]
        self.seqs = [10, 0]
        self.file, self.offset = 1, 4

    def pg(self) -> bool:
        return self.flavour.startswith("pg")

    def _next_txn(self) -> Pos | None:
        """The position shared by a GTID transaction's events (None for the others)."""
        if self.flavour == "mysql-gtid":
            self.gtids[self.rnd.randrange(2)] += 1
            a, b = self.gtids
            return Pos(f"mysql-gtid:{U1}:1-{a}" + (f",{U2}:1-{b}" if b else ""))
        if self.flavour == "mariadb":
            self.seqs[self.rnd.randrange(2)] += self.rnd.randint(1, 3)
            return Pos(f"mariadb-gtid:0-1-{self.seqs[0]},1-2-{self.seqs[1]}")
        return None

    def _offset(self, advance: bool = True) -> Pos:
        if advance:
            self.offset += self.rnd.randint(20, 90)
        return Pos(f"binlog:mysql-bin.{self.file:06d}:{self.offset}")

    def transaction(self, changes: list[dict[str, Any]], txid: int) -> list[ChangeEvent]:
        """BEGIN, the changes (``position`` filled in), COMMIT."""
        shared = self._next_txn()
        if self.flavour == "binlog" and self.rnd.random() < 0.2:
            self.file, self.offset = self.file + 1, 4
        rows: list[Pos | None] = []
        start = self.lsn - self.rnd.randint(0, 60)  # pg: the transaction began a while ago
        for number in range(len(changes)):
            if self.pg():
                rows.append(lsn(start + 1 + number))
            elif self.flavour == "binlog":
                rows.append(self._offset(advance=not (number and self.rnd.random() < 0.3)))
            else:
                rows.append(shared)
        if self.pg():
            self.lsn = max(self.lsn, start + len(changes)) + self.rnd.randint(1, 30)
        commit = lsn(self.lsn) if self.pg() else self._offset() if shared is None else shared
        begin = {"pg": commit, "pg-first-lsn": lsn(start), "binlog": None}.get(self.flavour, shared)
        out = [ChangeEvent(Op.BEGIN, None, position=begin, txid=txid)]
        out += [ChangeEvent(**c, position=p, txid=txid) for c, p in zip(changes, rows, strict=True)]
        out.append(ChangeEvent(Op.COMMIT, None, position=commit, txid=txid))
        return out

    def silent_commit(self) -> None:
        """A transaction the stream does not show (the low watermark)."""
        self._next_txn()
        self.lsn += 5
        self._offset()

    def open_high(self) -> Pos | None:
        """PostgreSQL writes H's row record now; others learn H's position at its commit."""
        if self.pg():
            self.lsn += 5
            return lsn(self.lsn)
        return None

    def close_high(self, opened: Pos | None) -> Pos:
        if opened is not None:
            self.lsn += 5  # H's commit: after the transactions that ran meanwhile
            return opened
        shared = self._next_txn()
        if shared is not None:
            return shared
        high = self._offset()
        self._offset()  # its XID event
        return high


@dataclass
class Source:
    """The source tables and the stream they produced."""

    flavour: str
    rnd: random.Random
    tables: dict[TableId, dict[Key, Row]] = field(
        default_factory=lambda: {t: {} for t in TABLES})
    stream: list[ChangeEvent] = field(default_factory=list)
    version: int = 0
    txid: int = 100

    def __post_init__(self) -> None:
        self.log = Log(self.flavour, self.rnd)

    def emit(self, events: Sequence[ChangeEvent]) -> None:
        for event in events:
            event.seq = len(self.stream) + 1
            self.stream.append(event)

    def transaction(self) -> list[ChangeEvent]:
        """Run one random transaction on the source; return its events (not yet emitted)."""
        self.txid += 1
        changes = [self._change() for _ in range(self.rnd.randint(1, 4))]
        return self.log.transaction(changes, self.txid)

    def _change(self) -> dict[str, Any]:
        table = self.rnd.choice(TABLES)
        rows, key = self.tables[table], (self.rnd.randrange(KEYS),)
        self.version += 1
        v, toast = self.version, self.log.pg() and self.rnd.random() < 0.4
        if self.rnd.random() < 0.04:
            rows.clear()
            return {"op": Op.TRUNCATE, "table": table}
        if key not in rows:
            rows[key] = {"id": key[0], "v": v, "blob": f"b{v}"}
            return {"op": Op.INSERT, "table": table, "key": key, "after": dict(rows[key])}
        choice = self.rnd.random()
        if choice < 0.25:
            return {"op": Op.DELETE, "table": table, "key": key, "before": rows.pop(key)}
        free = [(k,) for k in range(KEYS) if (k,) not in rows]
        old = None
        if choice < 0.45 and free:
            old, key = key, self.rnd.choice(free)
            rows[key] = {**rows.pop(old), "id": key[0]}
        blob = rows[key]["blob"] if toast else f"b{v}"
        rows[key] = {"id": key[0], "v": v, "blob": blob}
        after = {"id": key[0], "v": v} if toast else dict(rows[key])
        return {"op": Op.UPDATE, "table": table, "key": key, "after": after, "old_key": old,
                "unchanged": ("blob",) if toast else ()}

    def chunk(self) -> None:
        """One dump chunk: L, SELECT, maybe transactions in the window, H, surviving rows."""
        table = self.rnd.choice(TABLES)
        low = self.rnd.randrange(KEYS)
        self.log.silent_commit()
        selected = {k: dict(r) for k, r in self.tables[table].items() if k[0] >= low}
        opened = self.log.open_high()
        for _ in range(self.rnd.choice((0, 0, 1, 2))):
            events = self.transaction()
            self.emit(events)
            for e in events:
                if e.op is Op.TRUNCATE and e.table == table:
                    selected.clear()
                elif e.table == table:
                    for touched in (e.key, e.old_key):
                        if touched is not None:
                            selected.pop(touched, None)
        high = self.log.close_high(opened)
        self.emit([ChangeEvent(Op.READ, table, key, None, self._image(row), high,
                               dump_id="d") for key, row in sorted(selected.items())])

    def _image(self, row: Row) -> Row | EncodedRow:
        return EncodedRow(orjson.dumps(row)) if self.rnd.random() < 0.5 else row

    def run(self, steps: int) -> list[ChangeEvent]:
        for _ in range(steps):
            if self.rnd.random() < 0.25:
                self.chunk()
            else:
                self.emit(self.transaction())
        return self.stream


def decoded(image: Any) -> Row:
    return image.decode() if isinstance(image, EncodedRow) else dict(image)


def reference(events: Sequence[ChangeEvent]) -> list[dict[TableId, dict[Key, Row]]]:
    """The stream replayed naively, in order, without guards: the tables after each prefix
    (``[i]``: after the first ``i`` events)."""
    tables: dict[TableId, dict[Key, Row]] = {t: {} for t in TABLES}
    states = [{t: dict(r) for t, r in tables.items()}]
    for e in events:
        if e.table is not None:
            rows = tables[e.table]
            if e.op is Op.TRUNCATE:
                rows.clear()
            elif e.op is Op.DELETE:
                rows.pop(e.key)  # type: ignore[arg-type]
            elif e.op in (Op.INSERT, Op.UPDATE, Op.READ):
                assert e.key is not None
                source = rows.pop(e.old_key) if e.old_key is not None else rows.get(e.key)
                row = decoded(e.after)
                for column in e.unchanged:
                    assert source is not None
                    row[column] = source[column]
                rows[e.key] = row
        states.append({t: dict(r) for t, r in tables.items()})
    return states


def boundaries(events: Sequence[ChangeEvent]) -> list[int]:
    """Indexes where the engine may resume: not inside a transaction."""
    out, inside = [0], False
    for i, e in enumerate(events, 1):
        inside = e.op is not Op.COMMIT and (inside or e.op is Op.BEGIN)
        if not inside:
            out.append(i)
    return out


def scheme_of(flavour: str) -> GuardScheme | None:
    """The scheme a replica is configured with (None: learnt from the first position)."""
    return POSTGRES_AT_COMMIT if flavour == "pg-first-lsn" else None


# -- replicas with the guard (or tombstones) taken away, to show the tests catch it ---------

class NoGuardReplica(MemoryReplica):
    """Every change replaces the stored row."""

    def accepts(self, stored: StoredRow | None, change: RowChange) -> bool:
        return True


class HardDeleteReplica(MemoryReplica):
    """The guard, but deletes remove the row (no tombstones): the Hudi RFC's limitation."""

    def apply(self, plan: Plan) -> None:
        super().apply(plan)
        self.purge(Guard(LIMIT, 0))


def own_position_plan(plan: Plan, stream: Sequence[ChangeEvent]) -> Plan:
    """The plan with each change's guard replaced by its event's own position (a PostgreSQL
    row's record LSN: the ordering field of the Hudi RFC)."""
    def own(change: RowChange) -> RowChange:
        event = stream[change.seq - 1]
        assert event.position is not None
        return msgspec.structs.replace(
            change, guard=Guard(scheme_for(event.position).major(event.position),
                                change.guard.minor))
    tables = tuple(dataclasses.replace(t, changes=tuple(own(c) for c in t.changes))
                   for t in plan.tables)
    return dataclasses.replace(plan, tables=tables)


VARIANTS: dict[str, Callable[[], MemoryReplica]] = {
    "guard": MemoryReplica, "no-guard": NoGuardReplica, "hard-delete": HardDeleteReplica,
    "own-position": MemoryReplica,
}


@dataclass
class Delivery:
    """Feeds a stream to a replica through plan_batch in random batches, with retried
    (duplicated) batches, restarts that replay from an earlier transaction boundary, and
    tombstone purges below the committed position; checks the replica after every plan."""

    flavour: str
    stream: list[ChangeEvent]
    rnd: random.Random
    variant: str = "guard"
    purge: bool = False
    restarts: int = 0
    guards: dict[int, Guard] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.replica = VARIANTS[self.variant]()
        self.expected = reference(self.stream)
        self.bounds = boundaries(self.stream)

    def check(self, upto: int) -> None:
        for table in TABLES:
            got, want = self.replica.live(table), self.expected[upto][table]
            assert got == want, (f"{table} differs from the source replayed up to seq {upto} "
                                 f"({self.variant}): got {got}, want {want}")

    def apply(self, plan: Plan) -> None:
        if self.variant == "own-position":
            plan = own_position_plan(plan, self.stream)
        self.replica.apply(plan)
        for table_plan in plan.tables:
            for change in table_plan.changes:
                first = self.guards.setdefault(change.seq, change.guard)
                assert first == change.guard or self.variant == "own-position", (
                    f"seq {change.seq} guarded {change.guard} on replay, {first} before")

    def run(self, max_restarts: int = 3) -> None:
        state = ApplyState(scheme=scheme_of(self.flavour))
        at = high = acked = committed = 0
        while at < len(self.stream):
            batch = self.stream[at:at + self.rnd.randint(1, 9)]
            new, plan = plan_batch(state, batch)
            if self.rnd.random() < 0.1:
                self.apply(plan)  # applied, then the acknowledgement was lost: again
            self.apply(plan)
            state, at = new, at + len(batch)
            acked = max(acked, plan.through_seq)
            high = max(high, acked)
            self.check(high)
            committed = self._commit_and_purge(committed, acked)
            if self.restarts < max_restarts and self.rnd.random() < 0.2:
                self.restarts += 1
                at = acked = self.rnd.choice([b for b in self.bounds if committed <= b <= acked])
                state = ApplyState.restored(scheme_of(self.flavour), self.replica.barriers)
        self.check(len(self.stream))

    def _commit_and_purge(self, committed: int, acked: int) -> int:
        """The engine commits a boundary up to what the output acknowledged in this run;
        tombstones below its position may then go (without purges, replays start anywhere)."""
        if not self.purge:
            return 0
        committed = self.rnd.choice([b for b in self.bounds if committed <= b <= acked])
        commits = [e for e in self.stream[:committed] if e.op is Op.COMMIT]
        if commits and self.rnd.random() < 0.5:
            position = commits[-1].position
            assert position is not None
            scheme = scheme_of(self.flavour) or scheme_for(position)
            self.replica.purge(purge_bound(scheme, position, self.rnd.choice((0, 0, 50))))
        return committed


# -- the simulator's own tests ---------------------------------------------------------------

def test_simulated_stream_replays_to_the_source() -> None:
    for flavour in FLAVOURS:
        for seed in range(30):
            source = Source(flavour, random.Random(seed))
            stream = source.run(40)
            assert reference(stream)[-1] == source.tables, (flavour, seed)
            assert any(e.op is Op.READ for e in stream)


def test_simulated_pg_rows_are_not_in_commit_order() -> None:
    """The simulator produces what makes own-LSN guards wrong: a row record below the
    previous transaction's commit."""
    stream = Source("pg", random.Random(3)).run(60)
    commits = [e for e in stream if e.op is Op.COMMIT]
    lsns = {id(e): scheme_for(e.position).major(e.position)
            for e in stream if e.position is not None}
    previous, found = -1, False
    for e in stream:
        if e.op is Op.COMMIT:
            previous = lsns[id(e)]
        elif e.op in (Op.INSERT, Op.UPDATE, Op.DELETE):
            found = found or lsns[id(e)] < previous
    assert commits and found
