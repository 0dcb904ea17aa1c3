"""The running totals the API and /metrics read: events per op and table, counted by runs,
equal to a plain count of every event (tables equal but not the same object included), and
the commit time of the last COMMIT."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dblog.core.model import ChangeEvent, Op, TableId
from dblog.spi.metrics import Counters

OPS = [Op.READ, Op.INSERT, Op.UPDATE, Op.DELETE, Op.COMMIT]
TABLES = [None, TableId("s", "a"), TableId("s", "b")]


def _event(op: Op, table: int, copy: bool) -> ChangeEvent:
    known = TABLES[table]
    same = None if known is None else TableId(known.schema, known.name)
    event = ChangeEvent(op, same if copy else known, (1,))
    if op is Op.COMMIT:
        event.commit_ts = f"2026-11-24T08:{table:02d}:00Z"
    return event


@given(st.lists(st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 2), st.booleans()),
                         max_size=30), max_size=5))
def test_events_are_counted_per_op_and_table(batches: list[list[tuple[Op, int, bool]]]) -> None:
    counters = Counters()
    expected: Counter[tuple[str, str | None]] = Counter()
    last_commit_ts = None
    for spec in batches:
        events = [_event(*item) for item in spec]
        counters.delivered(events)
        last_commit_ts = next((e.commit_ts for e in reversed(events) if e.op is Op.COMMIT),
                              last_commit_ts)
        expected.update((e.op.value, None if e.table is None else str(e.table)) for e in events)
    counted = {(e["op"], e["table"]): e["count"] for e in counters.snapshot()["events"]}
    assert counted == {k: n for k, n in expected.items() if n}
    assert counters.snapshot()["batches"] == len(batches)
    assert counters.snapshot()["last_commit_ts"] == last_commit_ts


def test_forgetting_the_lag_marks_gives_no_lag_until_the_next_read() -> None:
    counters = Counters()
    counters.caught_up()
    assert counters.lag_seconds() is not None
    counters.forget_lag()
    assert counters.lag_seconds() is None and counters.snapshot()["lag_s"] is None
    counters.caught_up()
    assert counters.lag_seconds() == pytest.approx(0.0, abs=1.0)
