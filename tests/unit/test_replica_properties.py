"""Property tests of the replica apply core against the reference replay.

A simulated source (test_replica_sim) produces a stream per source flavour: overlapping
PostgreSQL transactions, GTID and binlog positions, dump chunks whose rows carry their high
watermark, TOAST-partial updates, key changes, truncates. The stream is fed to a replica in
random batches, with batches applied twice, restarts that replay from an earlier transaction
boundary (any one, or one at or after the committed position when tombstones are purged), and
the replica must equal the naive replay of the stream up to what it acknowledged after every
batch, and the source at the end: no row resurrected, none regressed.

The same harness with the guard taken away (every change replaces the row), with deletes that
remove rows instead of leaving tombstones, or with a PostgreSQL row's own LSN as its guard,
must fail: the last test shows that these properties are what the guard and tombstones buy.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dblog.core.model import ChangeEvent
from dblog.errors import FatalOutputError
from dblog.replica import ApplyState, Guard, plan_batch
from tests.unit.test_replica_sim import (
    FLAVOURS,
    TABLES,
    Delivery,
    Source,
    boundaries,
    scheme_of,
)


def run(flavour: str, rnd: Any, steps: int, variant: str, purge: bool) -> Delivery:
    source = Source(flavour, rnd)
    stream = source.run(steps)
    delivery = Delivery(flavour, stream, rnd, variant, purge)
    delivery.run()
    for table in TABLES:
        assert delivery.replica.live(table) == source.tables[table]
    return delivery


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flavour=st.sampled_from(FLAVOURS), rnd=st.randoms(use_true_random=False),
       steps=st.integers(1, 40), purge=st.booleans())
def test_replica_equals_the_source_under_replays_and_duplicates(
        flavour: str, rnd: Any, steps: int, purge: bool) -> None:
    run(flavour, rnd, steps, "guard", purge)


def guards_of(flavour: str, events: list[ChangeEvent], sizes: Any
              ) -> tuple[dict[int, Guard], set[Guard]]:
    """The guard of every change planned when ``events`` come in batches of ``sizes``, and
    the guards of the truncates planned."""
    state, at = ApplyState(scheme=scheme_of(flavour)), 0
    changes: dict[int, Guard] = {}
    truncates: set[Guard] = set()
    while at < len(events):
        batch = events[at:at + next(sizes)]
        state, plan = plan_batch(state, batch)
        at += len(batch)
        changes.update((c.seq, c.guard) for t in plan.tables for c in t.changes)
        truncates.update(t.truncate for t in plan.tables if t.truncate is not None)
    return changes, truncates


@settings(max_examples=100, deadline=None)
@given(flavour=st.sampled_from(FLAVOURS), rnd=st.randoms(use_true_random=False),
       steps=st.integers(1, 30))
def test_every_replay_of_a_suffix_gets_the_same_guards(flavour: str, rnd: Any,
                                                       steps: int) -> None:
    """Planned one event at a time from the start, then from every transaction boundary in
    random batches (a fresh state each time, as after a restart): one guard per event."""
    stream = Source(flavour, rnd).run(steps)
    first, truncates = guards_of(flavour, stream, iter(lambda: 1, 0))
    assert bool(first or truncates) == any(e.table is not None for e in stream)
    for start in boundaries(stream):
        again, again_truncates = guards_of(flavour, stream[start:],
                                           iter(lambda: rnd.randint(1, 7), 0))
        assert again_truncates <= truncates, start
        for seq, guard in again.items():
            assert first.get(seq, guard) == guard, (start, seq)


@pytest.mark.parametrize("variant", ["no-guard", "hard-delete", "own-position"])
def test_the_properties_fail_without_the_guard_or_tombstones(variant: str) -> None:
    flavours = ("pg",) if variant == "own-position" else FLAVOURS

    @settings(max_examples=300, deadline=None, derandomize=True, database=None,
              phases=[Phase.generate], report_multiple_bugs=False)
    @given(flavour=st.sampled_from(flavours), rnd=st.randoms(use_true_random=False),
           steps=st.integers(5, 40))
    def harness(flavour: str, rnd: Any, steps: int) -> None:
        run(flavour, rnd, steps, variant, purge=False)

    with pytest.raises((AssertionError, FatalOutputError)) as caught:
        harness()
    message = str(caught.value)
    assert ("differs from the source" in message or "does not hold" in message
            or "==" in message), message
