"""The Delta output claims a replica table for its epoch at the table's first use in a run,
not only the tables that existed at open: a table a deposed leader created after the
successor opened is fenced before the successor reads its greatest key, so the deposed
leader cannot append the keys the successor is about to append (blind appends do not
conflict: each key would be stored twice)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dblog.core.model import Op
from dblog.errors import LeadershipLost
from dblog.outputs import delta_table as dtab
from dblog.outputs.delta import dtab_open
from tests.contract.test_replica_output_contract import A, _change, _numbered
from tests.replica_targets import DeltaTarget, int_info


def test_a_table_made_after_open_is_claimed_at_its_first_use(tmp_path: Path) -> None:
    target = DeltaTarget(tmp_path / "delta", {A: int_info(A)}.get)
    events = _numbered([_change(Op.INSERT, k, k) for k in range(1, 4)])
    try:
        successor = target.new_output(epoch=2)
        successor.open(0)  # A does not exist yet: nothing to claim
        kinds, key = target.kinds(A)
        # the deposed leader (epoch 1), mid-flush past its own checks, creates A
        made = dtab_open(target.table_path(A), kinds, key, None, "contract", 1)
        successor._replica(A)  # the successor's first use of A, before it reads A's keys
        with pytest.raises(LeadershipLost):  # what the deposed leader's append of A meets
            dtab.check_epoch(made, "contract", 1)
        successor.write(events)
        assert successor.flush() == len(events)
        assert sorted(target.stored(A)) == [(1,), (2,), (3,)]
    finally:
        target.close()
