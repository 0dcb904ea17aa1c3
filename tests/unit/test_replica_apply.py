"""Unit tests of the replica apply core: guards per source, the reduction, the plan's meaning."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dblog.connectors.mysql.positions import BinlogPosition, MariadbGtid, MysqlGtidSet
from dblog.connectors.postgres.positions import Lsn
from dblog.core.model import ChangeEvent, EncodedRow, Op, TableId
from dblog.errors import FatalOutputError
from dblog.replica import (
    BINLOG,
    LIMIT,
    MARIADB_GTID,
    MAX_MINOR,
    MYSQL_GTID,
    POSTGRES,
    POSTGRES_AT_COMMIT,
    ApplyState,
    Guard,
    MemoryReplica,
    Plan,
    plan_batch,
    purge_bound,
    scheme_for,
)
from tests.unit.test_replica_sim import HardDeleteReplica, NoGuardReplica, Pos, lsn

T = TableId("s", "t")
GUARDS = st.builds(Guard, st.integers(0, LIMIT - 1), st.integers(0, LIMIT - 1))


def tx(begin: Any, *changes: ChangeEvent, commit: Any, seq: int) -> list[ChangeEvent]:
    """BEGIN, changes, COMMIT numbered from ``seq``."""
    events = [ChangeEvent(Op.BEGIN, None, position=begin), *changes,
              ChangeEvent(Op.COMMIT, None, position=commit)]
    for number, event in enumerate(events, seq):
        event.seq = number
    return events


def ins(key: int, v: int, position: Any = None, **extra: Any) -> ChangeEvent:
    return ChangeEvent(Op.INSERT, T, (key,), after={"id": key, "v": v, **extra},
                       position=position)


def upd(key: int, v: int, position: Any = None, *, old: int | None = None,
        toast: bool = False) -> ChangeEvent:
    after: dict[str, Any] = {"id": key, "v": v} if toast else {"id": key, "v": v, "blob": v}
    return ChangeEvent(Op.UPDATE, T, (key,), after=after, position=position,
                       old_key=None if old is None else (old,),
                       unchanged=("blob",) if toast else ())


def dele(key: int, position: Any = None) -> ChangeEvent:
    return ChangeEvent(Op.DELETE, T, (key,), position=position)


def read(key: int, v: int, position: Any, seq: int) -> ChangeEvent:
    return ChangeEvent(Op.READ, T, (key,), after=EncodedRow(f'{{"id":{key},"v":{v}}}'),
                       position=position, seq=seq)


def apply_all(replica: MemoryReplica, state: ApplyState, *batches: list[ChangeEvent]
              ) -> tuple[ApplyState, list[Plan]]:
    plans = []
    for batch in batches:
        state, plan = plan_batch(state, batch)
        replica.apply(plan)
        plans.append(plan)
    return state, plans


# -- guards -----------------------------------------------------------------------------------

@given(GUARDS, GUARDS)
def test_guard_encodings_keep_the_order(a: Guard, b: Guard) -> None:
    assert (a < b) == (a.hex() < b.hex()) == (a.to_bytes() < b.to_bytes())
    assert Guard.from_hex(a.hex()) == a == Guard.from_bytes(a.to_bytes())
    assert len(a.hex()) == 32 and len(a.to_bytes()) == 16


def test_majors_of_the_connectors_positions() -> None:
    assert POSTGRES.major(Lsn.parse("16/B374D848")) == 0x16_B374D848
    gtids = MysqlGtidSet.parse("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7-9,"
                               "8a94f357-aab4-11df-86ab-c80aa9429562:1")
    assert MYSQL_GTID.major(gtids) == 9
    assert MYSQL_GTID.major(gtids.with_gtid("8a94f357-aab4-11df-86ab-c80aa9429562", 2)) == 10
    assert MARIADB_GTID.major(MariadbGtid.parse("0-1-5,1-2-7")) == 12
    assert BINLOG.major(BinlogPosition("mysql-bin.000003", 1234)) == (3 << 32) | 1234
    for position in (Lsn(5), gtids, MariadbGtid.parse("0-1-5"), BinlogPosition("b.000001", 4)):
        assert scheme_for(position).kind == position.kind


def test_postgres_rows_are_guarded_by_the_commit_end_their_begin_carries() -> None:
    """dblog's connector positions BEGIN at the commit end: a batch ending inside a
    transaction plans and acknowledges its rows at once, guarded by the commit LSN whatever
    the rows' own LSNs; nothing is held in the state."""
    events = tx(lsn(300), ins(1, 1, lsn(90)), ins(2, 2, lsn(120)), commit=lsn(300), seq=1)
    state, first = plan_batch(ApplyState(), events[:3])
    [table] = first.tables
    assert [(c.key, c.guard) for c in table.changes] == [((1,), Guard(300, 1)),
                                                         ((2,), Guard(300, 2))]
    assert first.through_seq == 3 and first.scheme == POSTGRES.name
    assert state.txn is not None and state.txn.held == ()
    state, second = plan_batch(state, events[3:])
    assert second.tables == () and second.through_seq == 4 and state.txn is None


def test_postgres_rows_wait_for_their_commit_and_are_guarded_by_it() -> None:
    """POSTGRES_AT_COMMIT (a BEGIN at the first LSN): a batch ends inside a transaction:
    nothing of it is planned or acknowledged; the next batch plans it with the commit LSN,
    whatever the rows' own LSNs."""
    events = tx(lsn(100), ins(1, 1, lsn(90)), ins(2, 2, lsn(120)), commit=lsn(300), seq=1)
    state, first = plan_batch(ApplyState(scheme=POSTGRES_AT_COMMIT), events[:2])
    assert first.tables == () and first.through_seq == 0
    state, second = plan_batch(state, events[2:])
    [table] = second.tables
    assert [(c.key, c.guard) for c in table.changes] == [((1,), Guard(300, 1)),
                                                         ((2,), Guard(300, 2))]
    assert second.through_seq == 4 and second.position == lsn(300) and state.txn is None


def test_postgres_commit_order_beats_record_order() -> None:
    """T1 writes k's record at 200 and commits at 300; T2 wrote a record at 150 but updates
    k after T1 committed and commits at 400: T2's value must win, on replay too."""
    t1 = tx(lsn(300), upd(1, 10, lsn(200)), commit=lsn(300), seq=1)
    t2 = tx(lsn(400), upd(1, 20, lsn(150)), commit=lsn(400), seq=4)
    replica = MemoryReplica()
    apply_all(replica, ApplyState(), t1 + t2)
    apply_all(replica, ApplyState(), t1)  # a replay of the older transaction
    assert replica.live(T) == {(1,): {"id": 1, "v": 20, "blob": 20}}


def test_gtid_events_take_the_transaction_position() -> None:
    p1, p2 = Pos("mysql-gtid:u:1-7"), Pos("mysql-gtid:u:1-8")
    events = tx(p1, ins(1, 1, p1), ins(2, 2, p1), commit=p1, seq=1) + tx(
        p2, dele(1, p2), commit=p2, seq=5)
    _, plan = plan_batch(ApplyState(), events)
    assert {c.key: (c.guard, c.deleted) for c in plan.tables[0].changes} == {
        (1,): (Guard(8, 1), True), (2,): (Guard(7, 2), False)}


def test_binlog_rows_of_one_rows_event_are_ordered_by_index() -> None:
    at = Pos("binlog:mysql-bin.000002:500")
    events = tx(None, ins(1, 1, at), upd(1, 2, at), commit=Pos("binlog:mysql-bin.000002:560"),
                seq=1)
    _, plan = plan_batch(ApplyState(), events)
    [change] = plan.tables[0].changes
    assert change.guard == Guard((2 << 32) | 500, 2) and change.row == {"id": 1, "v": 2,
                                                                        "blob": 2}


def test_dump_rows_take_their_high_watermark_and_order_against_their_key() -> None:
    """PostgreSQL: a transaction committing between H's row record (h=250) and H's commit
    precedes the rows in the stream with a greater major; a later change of the key wins."""
    events = tx(lsn(260), ins(5, 1, lsn(210)), commit=lsn(260), seq=1)
    events += [read(1, 1, lsn(250), 4)]
    events += tx(lsn(290), upd(1, 2, lsn(280)), commit=lsn(290), seq=5)
    replica = MemoryReplica()
    state, (plan,) = apply_all(replica, ApplyState(), events)
    assert plan.tables[0].changes[1].guard == Guard(290, 1)
    apply_all(replica, state, [read(1, 1, lsn(250), 4)])  # the chunk delivered again
    assert replica.live(T)[(1,)] == {"id": 1, "v": 2, "blob": 2}
    assert plan_batch(ApplyState(), [read(1, 1, lsn(250), 4)])[1].tables[0].changes[0].guard \
        == Guard(250, MAX_MINOR)


# -- reduction and plan ---------------------------------------------------------------------

def test_last_change_per_key_key_changes_and_tombstones() -> None:
    events = tx(lsn(10), ins(1, 1, lsn(2)), upd(1, 2, lsn(3)), upd(2, 3, lsn(4), old=1),
                ins(3, 4, lsn(5)), dele(3, lsn(6)), commit=lsn(10), seq=1)
    _, plan = plan_batch(ApplyState(), events)
    assert [(c.key, c.deleted, c.guard.minor) for c in plan.tables[0].changes] == [
        ((1,), True, 3), ((2,), False, 3), ((3,), True, 5)]


def test_unchanged_toast_columns_are_filled_or_kept() -> None:
    """Filled from the same row's earlier change in the batch; else kept from the stored row
    (the old key's for a key change)."""
    first = tx(lsn(10), ins(1, 1, lsn(2), blob="big"), commit=lsn(10), seq=1)
    second = tx(lsn(20), upd(1, 2, lsn(12), toast=True), commit=lsn(20), seq=4)
    _, plan = plan_batch(ApplyState(), first + second)
    [change] = plan.tables[0].changes
    assert change.row == {"id": 1, "v": 2, "blob": "big"} and not change.keep
    replica = MemoryReplica()
    state, _ = apply_all(replica, ApplyState(), first)
    moved = tx(lsn(30), upd(7, 3, lsn(22), old=1, toast=True), commit=lsn(30), seq=7)
    state, (plan,) = apply_all(replica, state, second + moved)
    # key 1's update keeps its own stored blob, so the move keeps key 1's stored blob too
    assert {c.key: (c.deleted, c.keep, c.keep_from) for c in plan.tables[0].changes} == {
        (1,): (True, frozenset(), None), (7,): (False, frozenset({"blob"}), (1,))}
    _, (plan,) = apply_all(replica, state, tx(lsn(40), upd(8, 4, lsn(32), old=7, toast=True),
                                              commit=lsn(40), seq=10))
    assert plan.tables[0].changes[1].keep_from == (7,)
    assert replica.live(T) == {(8,): {"id": 8, "v": 4, "blob": "big"}}


def test_a_kept_column_chained_through_a_moved_row_splits_the_plan() -> None:
    """A partial key change 1 -> 2 then a partial update of 2: the second reads the row the
    first wrote, so the table comes twice; a replay that had applied only the first (key 1
    already a tombstone) still gets the right value."""
    replica = MemoryReplica()
    state, _ = apply_all(replica, ApplyState(), tx(lsn(10), ins(1, 1, lsn(2), blob="big"),
                                                   commit=lsn(10), seq=1))
    move = tx(lsn(20), upd(2, 2, lsn(12), old=1, toast=True), upd(2, 3, lsn(13), toast=True),
              commit=lsn(20), seq=4)
    _, plan = plan_batch(state, move)
    assert [t.table for t in plan.tables] == [T, T]
    assert plan.tables[1].changes[0].keep_from is None
    replica.apply(plan)
    assert replica.live(T) == {(2,): {"id": 2, "v": 3, "blob": "big"}}


def test_truncate_is_a_barrier_also_after_a_restart() -> None:
    replica = MemoryReplica()
    older = tx(lsn(10), ins(1, 1, lsn(2)), commit=lsn(10), seq=1)
    trunc = tx(lsn(20), ins(2, 2, lsn(12)), ChangeEvent(Op.TRUNCATE, T, position=lsn(13)),
               ins(3, 3, lsn(14)), commit=lsn(20), seq=4)
    _, (plan,) = apply_all(replica, ApplyState(), older + trunc)
    assert plan.tables[0].truncate == Guard(20, 2)
    assert [c.key for c in plan.tables[0].changes] == [(3,)]
    assert replica.live(T) == {(3,): {"id": 3, "v": 3}}
    restarted = ApplyState.restored(None, replica.barriers)
    _, (replayed,) = apply_all(replica, restarted, older)  # key 1 has no tombstone: barrier
    assert replayed.tables == () and replica.live(T) == {(3,): {"id": 3, "v": 3}}


def test_out_of_order_delete_and_insert_do_not_resurrect() -> None:
    """The Hudi RFC's case: insert, update, delete applied, then the update arrives again
    (a replayed suffix). A tombstone keeps the key's guard; hard deletes or no guard lose."""
    stream = (tx(lsn(10), ins(1, 1, lsn(2)), commit=lsn(10), seq=1)
              + tx(lsn(20), upd(1, 2, lsn(12)), commit=lsn(20), seq=4)
              + tx(lsn(30), dele(1, lsn(22)), commit=lsn(30), seq=7))
    results = {}
    for replica in (MemoryReplica(), HardDeleteReplica(), NoGuardReplica()):
        apply_all(replica, ApplyState(), stream)
        apply_all(replica, ApplyState(), stream[3:6])
        results[type(replica).__name__] = replica.live(T)
    assert results == {"MemoryReplica": {}, "HardDeleteReplica": {(1,): {"id": 1, "v": 2,
                                                                          "blob": 2}},
                       "NoGuardReplica": {(1,): {"id": 1, "v": 2, "blob": 2}}}


def test_tombstones_below_the_committed_position_are_purged() -> None:
    replica = MemoryReplica()
    stream = (tx(lsn(10), ins(1, 1, lsn(2)), ins(2, 2, lsn(3)), commit=lsn(10), seq=1)
              + tx(lsn(20), dele(1, lsn(12)), commit=lsn(20), seq=5)
              + tx(lsn(30), dele(2, lsn(22)), commit=lsn(30), seq=8))
    apply_all(replica, ApplyState(), stream)
    assert purge_bound(POSTGRES, lsn(30), 5) == Guard(25, 0)
    assert replica.purge(purge_bound(POSTGRES, lsn(30), 5)) == 1
    assert set(replica.tables[T]) == {(2,)} and replica.live(T) == {}
    with pytest.raises(ValueError, match="negative"):
        purge_bound(POSTGRES, lsn(30), -1)


# -- refusals --------------------------------------------------------------------------------

@pytest.mark.parametrize(("events", "says"), [
    (tx(Pos("mariadb-gtid:0-1-9"), ins(1, 1, Pos("mariadb-gtid:0-1-9")),
        commit=Pos("mariadb-gtid:0-1-9"), seq=1)
     + tx(Pos("mariadb-gtid:0-1-4"), ins(2, 1, Pos("mariadb-gtid:0-1-4")),
          commit=Pos("mariadb-gtid:0-1-4"), seq=4), "gtid_strict_mode"),
    (tx(lsn(10), ins(1, 1, lsn(2)), commit=lsn(10), seq=1)
     + tx(Pos("binlog:b.000001:4"), ins(2, 1, Pos("binlog:b.000001:4")),
          commit=Pos("binlog:b.000001:9"), seq=4), "changed kind"),
    (tx(None, ins(1, 1, lsn(2)), commit=lsn(10), seq=1), "BEGIN .*has no position"),
    ([*tx(lsn(10), ins(1, 1, lsn(2)), commit=lsn(10), seq=1)[:2],
      ChangeEvent(Op.BEGIN, None, position=lsn(11), seq=3)], "before the COMMIT"),
    ([ins(1, 1, lsn(2))], "outside a transaction"),
    ([read(1, 1, None, 1)], "no position"),
    (tx(lsn(10), ChangeEvent(Op.UPDATE, T, None, after={}, position=lsn(2)), commit=lsn(10),
        seq=1), "has no key"),
])
def test_streams_a_guard_cannot_order_are_refused(events: list[ChangeEvent],
                                                  says: str) -> None:
    with pytest.raises(FatalOutputError, match=says):
        plan_batch(ApplyState(), events)


def test_a_replica_refuses_plans_of_another_scheme() -> None:
    replica = MemoryReplica()
    apply_all(replica, ApplyState(), tx(lsn(10), ins(1, 1, lsn(2)), commit=lsn(10), seq=1))
    p = Pos("mysql-gtid:u:1-3")
    with pytest.raises(FatalOutputError, match="rebuild the replica"):
        apply_all(replica, ApplyState(), tx(p, ins(1, 1, p), commit=p, seq=4))
