"""An output's checkpoint ahead of the state store (a crash or a transient error between its
commit and the store's save): adopted when it is the only output, with the dump requests the
store holds since; with several outputs the run replays from the store instead of refusing to
start; an output that skips by seq (Kafka exactly-once) is refused beside others at start; and
a restart in the same process does not acknowledge to the previous run's closed log reader."""

from __future__ import annotations

import time
from typing import Any

import pytest

from dblog.core.acks import PipelineState, adopted
from dblog.core.dumps import Dump, DumpQueue, DumpState, TableProgress
from dblog.core.model import TableId
from dblog.core.positions import Position
from dblog.engine.delivery import Delivery
from dblog.errors import (
    ConfigError,
    DblogError,
    FatalOutputError,
    RetryableSourceError,
    RetryableStateError,
)
from dblog.outputs.kafka import KafkaOutput
from dblog.state import state_from_json
from dblog.testing import FakeClock, ListOutput, MemoryStateStore, TransactionalListOutput
from tests.unit import engine_script
from tests.unit.engine_script import Run, assert_replay_equals_source, fast_settings
from tests.unit.test_engine_memory import make_db


def _state(store: MemoryStateStore) -> PipelineState:
    assert store.stored is not None
    return state_from_json(store.stored.data)


class BlippingStore(MemoryStateStore):
    """A store (ZooKeeper-like) whose save fails once, retryably, after ``healthy`` saves."""

    def __init__(self, healthy: int) -> None:
        super().__init__()
        self.healthy, self.blipped = healthy, False

    def save(self, data: dict[str, Any], expected_version: int | None, epoch: int) -> int:
        if self.writes >= self.healthy and not self.blipped:
            self.blipped = True
            raise RetryableStateError("connection loss (transient)")
        return super().save(data, expected_version, epoch)


def _upserts(db: Any, table: Any, count: int) -> Any:
    written = [0]

    def write(run: Run) -> None:
        if written[0] < count:
            written[0] += 1
            db.transaction([("upsert", table, {"id": written[0] % 7, "v": written[0]})])
    return write


def test_with_two_outputs_a_checkpoint_ahead_of_the_store_is_replayed_not_fatal() -> None:
    db, table = make_db(0)
    replica, plain = TransactionalListOutput("replica"), ListOutput("plain")
    store = BlippingStore(healthy=3)
    write = _upserts(db, table, 30)
    with pytest.raises(RetryableStateError):  # the supervisor restarts on this
        Run(db, [replica, plain], store, settings=fast_settings(), on_poll=write).go()
    assert replica.checkpoint is not None and replica.checkpoint.seq > _state(store).seq
    Run(db, [replica, plain], store, settings=fast_settings(), on_poll=write).go()
    assert_replay_equals_source(plain.events, db)


def test_an_adopted_checkpoint_keeps_a_dump_request_the_store_has_since() -> None:
    db, table = make_db(20)
    out, store = TransactionalListOutput(), MemoryStateStore()
    box: dict[str, Any] = {}

    def script(run: Run) -> None:
        if run.polls == 3:
            db.transaction([("upsert", table, {"id": 100, "v": 1})])  # a pending point
            box["future"] = run.engine.request_dump([table])  # accepted at the next turn
        elif run.polls == 4:
            deadline = time.monotonic() + 5
            while (out.checkpoint is None or out.checkpoint.seq <= _state(store).seq) \
                    and time.monotonic() < deadline:
                time.sleep(0.01)  # the output's thread commits the flush accept() asked for
            raise RetryableSourceError("source connection reset (transient)")

    settings = fast_settings(output_threads=True, flush_interval_s=1e9)
    with pytest.raises(RetryableSourceError):
        Run(db, [out], store, settings=settings, on_poll=script, stop_when_idle=False).go()
    dump_id = box["future"].result(1)
    assert out.checkpoint is not None and out.checkpoint.seq > _state(store).seq
    assert dump_id not in [d.id for d in state_from_json(out.checkpoint.state).dumps.dumps]
    Run(db, [out], store, settings=fast_settings(), max_polls=50).go()
    assert dump_id in [d.id for d in _state(store).dumps.dumps]


def _dump(dump_id: str, state: DumpState, chunks: int = 0) -> Dump:
    progress = TableProgress(TableId("public", "t"), started=chunks > 0, chunks=chunks)
    return Dump(id=dump_id, tables=(progress,), state=state)


def test_adopted_takes_progress_from_the_checkpoint_and_operator_changes_from_the_store(
        ) -> None:
    checkpoint = PipelineState(seq=9, dumps=DumpQueue((_dump("a", DumpState.RUNNING, 5),
                                                      _dump("b", DumpState.RUNNING, 2))))
    stored = PipelineState(seq=4, dumps=DumpQueue((_dump("a", DumpState.RUNNING, 3),
                                                  _dump("b", DumpState.CANCELLED, 1),
                                                  _dump("c", DumpState.QUEUED))))
    state = adopted(checkpoint, stored)
    assert state.seq == 9
    assert [(d.id, d.state, d.chunks) for d in state.dumps.dumps] == [
        ("a", DumpState.RUNNING, 5), ("b", DumpState.CANCELLED, 2), ("c", DumpState.QUEUED, 0)]


def test_exactly_once_kafka_beside_another_output_is_refused_at_start() -> None:
    kafka = KafkaOutput({"bootstrap_servers": "h:1", "delivery": "exactly-once"})
    with pytest.raises(ConfigError, match="only output"):
        Delivery([kafka, ListOutput()], MemoryStateStore(), FakeClock(), epoch=1, batch_size=10)
    Delivery([kafka], MemoryStateStore(), FakeClock(), epoch=1, batch_size=10)
    at_least_once = KafkaOutput({"bootstrap_servers": "h:1"})
    Delivery([at_least_once, ListOutput()], MemoryStateStore(), FakeClock(), epoch=1,
             batch_size=10)


class ClosingReader(engine_script.ScriptedReader):
    """Refuses acknowledgements once closed, as the PostgreSQL reader does."""

    closed = False

    def acknowledge(self, position: Position) -> None:
        if self.closed:
            raise RetryableSourceError("the replication stream is not started")
        super().acknowledge(position)

    def close(self) -> None:
        self.closed = True
        super().close()


def test_a_restart_in_process_does_not_acknowledge_to_the_closed_reader(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_script, "ScriptedReader", ClosingReader)
    db, table = make_db(0)
    out, store = TransactionalListOutput(), BlippingStore(healthy=3)
    run = Run(db, [out], store, settings=fast_settings(), on_poll=_upserts(db, table, 30))
    with pytest.raises(RetryableStateError):
        run.go()
    assert out.checkpoint is not None and out.checkpoint.seq > _state(store).seq
    run.go()  # Pipeline.run restarts the same engine
    assert _state(store).seq >= out.checkpoint.seq


class FailingFlush(ListOutput):
    def __init__(self) -> None:
        super().__init__("failing")
        self.fail = False

    def flush(self) -> int:
        if self.fail:
            raise FatalOutputError("the target refused the commit")
        return super().flush()


def test_a_request_whose_commit_fails_resolves_its_future_with_that_error() -> None:
    db, table = make_db(5)
    out, box = FailingFlush(), {}

    def script(run: Run) -> None:
        if run.polls == 3:  # read in this poll; the request runs first in the next turn
            db.transaction([("upsert", table, {"id": 100, "v": 1})])  # a pending point
            out.fail = True
            box["future"] = run.engine.request_dump([table])

    with pytest.raises(FatalOutputError):
        Run(db, [out], MemoryStateStore(), settings=fast_settings(flush_interval_s=1e9),
            on_poll=script, stop_when_idle=False).go()
    with pytest.raises(FatalOutputError, match="refused the commit"):  # its own class:
        box["future"].result(0)  # the API answers a refusal 422, a capture that is down 503


def test_a_request_a_run_left_unapplied_is_failed_not_applied_by_the_next_run() -> None:
    """The caller learns the request was not queued (the API answers 503): a retry then
    queues it once, where a request applied by the next run after its caller gave up would
    be there twice."""
    db, table = make_db(5)
    box: dict[str, Any] = {}

    def script(run: Run) -> bool:
        if "future" in box:  # the next run: stop after a few turns
            return run.polls > 6
        if run.polls == 3:
            box["future"] = run.engine.request_dump([table])  # applied at the next turn ...
            raise RetryableSourceError("source connection reset")  # ... which never comes
        return False

    store = MemoryStateStore()
    run = Run(db, [ListOutput()], store, settings=fast_settings(), on_poll=script,
              stop_when_idle=False, max_polls=30)
    with pytest.raises(RetryableSourceError):
        run.go()
    with pytest.raises(DblogError, match="between two runs"):
        box["future"].result(0)
    between = run.engine.request_dump([table])  # between two runs: refused at once
    with pytest.raises(DblogError, match="between two runs"):
        between.result(0)
    run.go()
    assert _state(store).dumps.dumps == ()
