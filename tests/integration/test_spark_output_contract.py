"""The replica output contract (tests/contract/test_replica_output_contract.py) run against the
Spark output's Delta sink in one local Spark session: random streams equal the replay, a
PostgreSQL transaction spanning flushes, the checkpoint committed with the data, a deposed
leader refused by the tables, the truncate barrier across restarts and across a crash after
the truncate's DELETE, tombstones, added columns. The tables are read back with delta-rs
(the ``delta`` output's reader), independently of Spark: a table the Spark output wrote
looks like one the ``delta`` output wrote."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dblog.core.model import ChangeEvent, Op, TableId, TableInfo
from dblog.errors import RetryableOutputError
from dblog.outputs.spark import SparkOutput
from dblog.spi import (
    Checkable,
    CheckpointingOutput,
    DiscardingOutput,
    FencedOutput,
    Output,
    PipelineBound,
)
from tests.contract import test_replica_output_contract as contract
from tests.replica_targets import DeltaTarget, int_info
from tests.unit.test_replica_sim import reference

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration,
              pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning")]
A, B = contract.A, contract.B


class SparkTarget(DeltaTarget):
    """The Delta target (read with delta-rs) written by the Spark output."""

    name = "spark-delta"

    def __init__(self, path: Path, lookup: Any, spark: SparkSession) -> None:
        super().__init__(path, lookup)
        self.spark = spark

    def new_output(self, epoch: int = 1, pipeline: str = "contract",  # type: ignore[override]
                   **config: Any) -> SparkOutput:
        top: dict[str, Any] = {k: config.pop(k) for k in ("commit_interval_s", "commit_every")
                               if k in config}
        sink = {"type": "delta", "path": str(self.path), **config}
        output = SparkOutput({"type": "spark", "sinks": [sink], "commit_interval_s": 0, **top},
                             tables=self.lookup, session=self.spark)
        output.bind(pipeline, epoch)
        self.outputs.append(output)  # type: ignore[arg-type]
        return output


@pytest.fixture()
def infos() -> dict[TableId, TableInfo]:
    return {A: int_info(A), B: int_info(B)}


@pytest.fixture()
def target(spark_session: SparkSession, tmp_path: Path,
           infos: dict[TableId, TableInfo]) -> Iterator[SparkTarget]:
    made = SparkTarget(tmp_path / "delta", infos.get, spark_session)
    try:
        yield made
    finally:
        made.close()


def test_every_ability(target: SparkTarget) -> None:
    output = target.new_output()
    for ability in (CheckpointingOutput, PipelineBound, FencedOutput, DiscardingOutput, Output,
                    Checkable):
        assert isinstance(output, ability), ability


def test_random_stream_equals_the_replay(target: SparkTarget) -> None:
    contract.test_random_stream_equals_the_replay(target, "pg")


def test_an_open_transaction_is_written_up_to_its_last_event(target: SparkTarget) -> None:
    contract.test_an_open_transaction_is_written_up_to_its_last_event(target)


def test_the_checkpoint_is_committed_with_the_data(target: SparkTarget) -> None:
    contract.test_the_checkpoint_is_committed_with_the_data(target)


def test_a_deposed_leaders_commit_is_refused_by_the_target(target: SparkTarget) -> None:
    contract.test_a_deposed_leaders_commit_is_refused_by_the_target(target)


def test_the_truncate_barrier_survives_a_restart(target: SparkTarget) -> None:
    contract.test_the_truncate_barrier_survives_a_restart(target)


def test_tombstones_are_hidden_kept_and_purged_by_margin(target: SparkTarget) -> None:
    contract.test_tombstones_are_hidden_kept_and_purged_by_margin(target)


def test_added_source_columns_reach_the_replica(target: SparkTarget,
                                               infos: dict[TableId, TableInfo]) -> None:
    contract.test_added_source_columns_reach_the_replica(target, infos)


def test_commits_at_most_every_commit_interval_and_at_close(target: SparkTarget) -> None:
    events = contract.stream("pg", 13, 12)
    output = target.new_output(commit_interval_s=3600)
    output.open(0)
    output.write(events)
    assert output.flush() == 0  # not due: nothing written, nothing acknowledged
    assert contract.live(target) == reference(events)[0]
    output.close()  # writes what waits
    assert contract.live(target) == reference(events)[-1]


def _inserts(*keys: int) -> list[ChangeEvent]:
    return [e for k in keys for e in contract._change(Op.INSERT, k, k, k)]


def test_keys_beyond_the_stored_ones_are_appended_and_a_replay_merges(
        target: SparkTarget) -> None:
    """A dump into a growing table appends (no join with the table); a replay of keys the
    table holds merges, so every key is stored once."""
    events = contract._numbered([_inserts(1, 2, 3), _inserts(4, 5),
                                 contract._change(Op.UPDATE, 2, 6, 20)])
    output = target.new_output()
    output.open(0)
    writer = output._delta
    assert writer is not None
    output.write(events[:9])
    output.flush()
    assert [m.get("appended") for m in writer.metrics] == [True]
    output.write(events[9:])
    output.flush()
    assert [m.get("appended") for m in writer.metrics] == [None]  # key 2 is stored: MERGE
    output.close()
    replay = target.new_output()
    replay.open(0)
    replay.write(events)
    replay.flush()
    assert len(target._records(A)) == 5
    assert target.live(A)[(2,)]["v"] == 20


def test_an_append_whose_answer_was_lost_is_not_appended_again(
        target: SparkTarget, monkeypatch: pytest.MonkeyPatch) -> None:
    """The append landed but the flush failed: the retry must not append the rows again."""
    events = contract._numbered([_inserts(1, 2, 3)])
    output = target.new_output()
    output.open(0)
    writer = output._delta
    assert writer is not None
    real = writer.fence.commit_blind
    failed: list[bool] = []

    def landed_then_failed(table: Any, seq: int, action: Any) -> None:
        real(table, seq, action)
        if not failed:
            failed.append(True)
            raise RetryableOutputError("the answer was lost")

    monkeypatch.setattr(writer.fence, "commit_blind", landed_then_failed)
    output.write(events)
    with pytest.raises(RetryableOutputError):
        output.flush()
    assert output.flush() == len(events)
    assert len(target._records(A)) == 3
    assert target.live(A) == {(k,): {"id": k, "v": k, "blob": f"b{k}"} for k in (1, 2, 3)}


def test_a_crash_in_a_truncating_flush_never_brings_truncated_rows_back(
        spark_session: SparkSession, tmp_path: Path, infos: dict[TableId, TableInfo]) -> None:
    """The contract's crash points (tests/contract/test_replica_output_contract.py), cut to
    the one that failed (each costs a dozen Spark jobs): killed at the append after the
    truncate's DELETE, whose barrier must be stored by then (tests/unit/
    test_spark_delta_truncate_order.py: the order, and the DELETE again at open)."""
    from dblog.outputs.spark_delta import SparkDeltaWriter

    made: list[SparkTarget] = []

    def fresh() -> SparkTarget:
        made.append(SparkTarget(tmp_path / f"delta{len(made)}", infos.get, spark_session))
        return made[-1]

    points = [(SparkDeltaWriter, "_delete"), (SparkDeltaWriter, "_append"),
              (SparkDeltaWriter, "_merge")]
    try:
        assert contract.truncating_flush_crashes(fresh, points, only=[1]) == 1
    finally:
        for target in made:
            target.close()
