"""Numeric keys whose scale changes (PostgreSQL's unconstrained ``numeric``: ``1.5`` and
``1.50`` are one value but two texts) in the replica apply core and the SQL targets.

The events carry a numeric the way PostgreSQL prints it, scale included, and PostgreSQL logs
a change of a key's scale as a key change (it compares the key's stored bytes: the old key
comes with the event). So the apply core, comparing keys as the events' canonical values,
sees ``"1.5"`` and ``"1.50"`` as two keys, and a replica keyed the same way (the exact text)
equals the source through any stream, replay and duplicate: the property test below, against
the naive replay and the source itself. A target that compares them as numbers (a NUMERIC key
column) makes one row of the tombstone of ``"1.5"`` and the upsert of ``"1.50"`` that share a
guard, and loses it; that is why every SQL target stores such keys as text.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import msgspec
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dblog.core.model import ChangeEvent, Key, Op, Row
from dblog.outputs.sql_kinds import exact_key, kind_of, sa_type
from dblog.replica import POSTGRES, ApplyState, MemoryReplica, Plan, RowChange, plan_batch
from dblog.replica.reduce import TablePlan
from tests.unit.test_replica_sim import TABLES, Delivery, Source, lsn

A = TABLES[0]
SPELLINGS = {Decimal("0"): ("0", "0.0", "0.00"), Decimal("1.5"): ("1.5", "1.50", "1.500"),
             Decimal("2"): ("2", "2.0"), Decimal("10"): ("10", "10.0", "10.00")}
"""Values of an unconstrained numeric key, each with the texts PostgreSQL may store."""


@dataclass
class NumericSource(Source):
    """A PostgreSQL table ``a (k numeric PRIMARY KEY, v int)``: one row per value (keys are
    unique as numbers), stored in one of its spellings; a key's spelling changes only by an
    update of the key, which PostgreSQL logs with the old key."""

    def held(self, value: Decimal) -> Key | None:
        return next(((k,) for (k,) in self.tables[A] if Decimal(k) == value), None)

    def _change(self) -> dict[str, Any]:
        rows = self.tables[A]
        self.version += 1
        value = self.rnd.choice(list(SPELLINGS))
        key = self.held(value)
        if self.rnd.random() < 0.03:
            rows.clear()
            return {"op": Op.TRUNCATE, "table": A}
        if key is None:
            key = (self.rnd.choice(SPELLINGS[value]),)
            rows[key] = {"k": key[0], "v": self.version}
            return {"op": Op.INSERT, "table": A, "key": key, "after": dict(rows[key])}
        choice, old = self.rnd.random(), None
        if choice < 0.25:
            return {"op": Op.DELETE, "table": A, "key": key, "before": rows.pop(key)}
        if choice < 0.75:  # a new key: mostly the same value, spelt another way
            other = value if self.rnd.random() < 0.7 else self.rnd.choice(list(SPELLINGS))
            spelt = (self.rnd.choice(SPELLINGS[other]),)
            if spelt != key and (other == value or self.held(other) is None):
                old, key = key, spelt
                rows.pop(old)
        rows[key] = {"k": key[0], "v": self.version}
        return {"op": Op.UPDATE, "table": A, "key": key, "after": dict(rows[key]),
                "old_key": old}

    def chunk(self) -> None:
        """A dump chunk of the keys from a value up (the window drops what the log touched:
        both keys of a key change, as PostgreSQL logs them)."""
        low = self.rnd.choice(list(SPELLINGS))
        self.log.silent_commit()
        selected = {k: dict(r) for k, r in self.tables[A].items() if Decimal(k[0]) >= low}
        opened = self.log.open_high()
        for _ in range(self.rnd.choice((0, 1, 2))):
            events = self.transaction()
            self.emit(events)
            for e in events:
                if e.op is Op.TRUNCATE:
                    selected.clear()
                for touched in (e.key, e.old_key):
                    selected.pop(touched, None)  # type: ignore[arg-type]
        high = self.log.close_high(opened)
        self.emit([ChangeEvent(Op.READ, A, key, None, row, high, dump_id="d")
                   for key, row in sorted(selected.items())])


def by_value(rows: dict[Key, Row]) -> list[tuple[Decimal, str, Any]]:
    return sorted((Decimal(r["k"]), r["k"], r["v"]) for r in rows.values())


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rnd=st.randoms(use_true_random=False), steps=st.integers(1, 40), purge=st.booleans())
def test_a_replica_keyed_by_the_exact_text_equals_the_source(rnd: Any, steps: int,
                                                             purge: bool) -> None:
    """Random batches, duplicated batches, replays from earlier boundaries, purges: after
    every plan the replica equals the naive replay (Delivery checks it), at the end the
    source, and no two of its rows hold the same number."""
    source = NumericSource("pg", rnd)
    delivery = Delivery("pg", source.run(steps), rnd, "guard", purge)
    delivery.run()
    live = delivery.replica.live(A)
    assert live == source.tables[A]
    assert len({value for value, _, _ in by_value(live)}) == len(live)


class ByValueReplica(MemoryReplica):
    """A replica whose key column compares numbers (a NUMERIC key): keys equal as numbers
    are one row."""

    def apply(self, plan: Plan) -> None:
        def one(change: RowChange) -> RowChange:
            return msgspec.structs.replace(change, key=(Decimal(change.key[0]).normalize(),))

        tables = tuple(TablePlan(t.table, t.truncate, tuple(map(one, t.changes)), t.schema)
                       for t in plan.tables)
        super().apply(Plan(tables, plan.through_seq, plan.barriers, plan.position,
                           plan.scheme))


def test_a_target_comparing_numeric_keys_as_numbers_loses_rows() -> None:
    @settings(max_examples=300, deadline=None, derandomize=True, database=None,
              phases=[Phase.generate], report_multiple_bugs=False)
    @given(rnd=st.randoms(use_true_random=False), steps=st.integers(5, 30))
    def harness(rnd: Any, steps: int) -> None:
        source = NumericSource("pg", rnd)
        replica = ByValueReplica()
        replica.apply(plan_batch(ApplyState(scheme=POSTGRES), source.run(steps))[1])
        assert by_value(replica.live(A)) == by_value(source.tables[A])

    with pytest.raises(AssertionError):
        harness()


def scale_change() -> list[ChangeEvent]:
    events = [ChangeEvent(Op.BEGIN, None, position=lsn(0x200)),
              ChangeEvent(Op.INSERT, A, ("1.5",), None, {"k": "1.5", "v": 1}, lsn(0x1F0)),
              ChangeEvent(Op.COMMIT, None, position=lsn(0x200)),
              ChangeEvent(Op.BEGIN, None, position=lsn(0x300)),
              ChangeEvent(Op.UPDATE, A, ("1.50",), None, {"k": "1.50", "v": 1}, lsn(0x2F0),
                          old_key=("1.5",)),
              ChangeEvent(Op.COMMIT, None, position=lsn(0x300))]
    for seq, event in enumerate(events, 1):
        event.seq = seq
    return events


def test_a_scale_change_is_two_keys_to_the_core_and_to_every_sql_target() -> None:
    _, plan = plan_batch(ApplyState(scheme=POSTGRES), scale_change())
    (table,) = plan.tables
    old, new = table.changes
    assert (old.key, old.row, new.key) == (("1.5",), None, ("1.50",))
    assert old.guard == new.guard  # one event: a NUMERIC key would make them one row
    unconstrained, fixed = kind_of("numeric"), kind_of("numeric(10,2)")
    assert exact_key(unconstrained) and not exact_key(fixed)
    for dialect in ("postgresql", "sqlite", "mysql"):
        assert isinstance(sa_type(unconstrained, dialect, True), sa.String), dialect
    assert isinstance(sa_type(unconstrained, "postgresql", False), sa.Numeric)
    assert isinstance(sa_type(fixed, "postgresql", True), sa.Numeric)  # one spelling a value
