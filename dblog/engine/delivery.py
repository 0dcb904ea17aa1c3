"""Hands emitted events to every output and commits state up to what all of them acknowledged.

Outputs are driven through sinks (:mod:`dblog.engine.sinks`): with ``threaded`` each output
works from a bounded queue on its own thread, so its round trips do not hold the log loop, and
acknowledgements arrive one flush request later; without it, on the calling thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from dblog.core.acks import (
    CommitPoint,
    PipelineState,
    adopted,
    apply_points,
    min_acknowledged,
    split_acknowledged,
)
from dblog.core.dumps import Dump
from dblog.core.model import ChangeEvent
from dblog.core.positions import Position
from dblog.engine.sinks import InlineSink, Sink, ThreadedSink
from dblog.errors import ConfigError, FatalOutputError, LeadershipLost
from dblog.spi import (
    Checkpoint,
    CheckpointingOutput,
    Clock,
    FencedOutput,
    FreshStartAware,
    Output,
    PipelineBound,
    SoleOutput,
    StateStore,
)
from dblog.spi.metrics import Counters, MetricsSink
from dblog.state import state_from_json, state_to_json

log = logging.getLogger("dblog.engine.delivery")


class Delivery:
    """Batching, output acknowledgement and fenced state commits for one engine run."""

    def __init__(
        self,
        outputs: Sequence[Output],
        store: StateStore,
        clock: Clock,
        *,
        epoch: int,
        batch_size: int,
        max_retries: int = 8,
        threaded: bool = False,
        max_batches: int = 4,
        pipeline: str = "dblog",
    ) -> None:
        if not outputs:
            raise FatalOutputError("a pipeline needs at least one output")
        self.outputs = list(outputs)
        _check_sole(self.outputs)
        for output in self.outputs:
            if isinstance(output, FencedOutput):  # checks leadership right before writing
                output.set_fence(self._may_write)
        self.store = store
        self.clock = clock
        self.epoch = epoch
        self.batch_size = batch_size
        self.max_retries = max_retries
        self.threaded, self.max_batches, self.pipeline = threaded, max_batches, pipeline
        self.sinks: list[Sink] = []
        self.state = PipelineState()
        self.version: int | None = None
        self.last_seq = 0
        self._batch: list[ChangeEvent] = []
        self._points: list[CommitPoint] = []
        self._asked_points = 0  # how many of the first points the last flush asked covers
        self._flush_asked_seq = 0
        """The last seq handed over when a flush was last asked for: a point at or below it
        is never replaced by a later one (see :meth:`mark`)."""
        self.on_commit: Callable[[Position], None] | None = None
        self.is_leader: Callable[[], bool] = lambda: True
        self.metrics: MetricsSink = Counters()
        """Told of each delivered batch (the engine sets its own)."""

    def _may_write(self) -> bool:
        return self.is_leader()

    def _check_leader(self) -> None:
        if not self.is_leader():
            raise LeadershipLost("leadership lost: nothing more is emitted or committed")

    def resume(self, state: PipelineState, version: int | None) -> None:
        self._check_leader()  # opening an output may cut it back: a leader's act
        self.state, self.version, self.last_seq = state, version, state.seq
        self._batch, self._points, self._flush_asked_seq = [], [], state.seq
        self._asked_points = 0
        for output in self.outputs:
            if isinstance(output, PipelineBound):
                output.bind(self.pipeline, self.epoch)
            if version is None and isinstance(output, FreshStartAware):
                output.fresh_start()  # no state at all: an output holding events refuses
        self.sinks = [self._sink(output) for output in self.outputs]
        for sink in self.sinks:
            sink.open(state.seq)
        self._adopt_newer_checkpoint()

    def _adopt_newer_checkpoint(self) -> None:
        """An output that committed a checkpoint past the state store's (a crash, or a
        transient error, between its commit and the store's save) decides where this run
        resumes when it is the pipeline's only output: its state is saved to the store and
        replaces the loaded one (with the dump requests and operator changes the store has
        since, :func:`~dblog.core.acks.adopted`). With several outputs the others may not
        have those events: the run resumes from the store and the checkpointing outputs take
        the replay (none of them skips by seq: :func:`_check_sole` refused those)."""
        checkpoints = [o.committed_checkpoint() for o in self.outputs
                       if isinstance(o, CheckpointingOutput)]
        newer = [c for c in checkpoints if c is not None and c.seq > self.state.seq]
        if not newer:
            return
        if len(self.outputs) > 1:
            log.info("an output's checkpoint (seq %d) is ahead of the state store's (seq %d): "
                     "the other outputs may not hold those events, so the run replays them "
                     "from the store", newer[0].seq, self.state.seq)
            return
        state = adopted(state_from_json(newer[0].state), self.state)
        log.warning("resuming from the output's checkpoint at seq %d (the state store had %d)",
                    state.seq, self.state.seq)
        self.save(state)
        self.last_seq = state.seq

    def _sink(self, output: Output) -> Sink:
        if self.threaded:
            return ThreadedSink(output, self.clock, self.max_retries, self.max_batches,
                                self.metrics, self._may_write)
        return InlineSink(output, self.clock, self.max_retries, self.metrics)

    def emit(self, event: ChangeEvent) -> None:
        self.last_seq += 1
        event.seq = self.last_seq
        self._batch.append(event)
        if len(self._batch) >= self.batch_size:
            self.deliver()

    def emit_all(self, events: list[ChangeEvent]) -> None:
        """Emit many events at once (a chunk's rows): same effect as emit() for each."""
        seq = self.last_seq
        for event in events:
            seq += 1
            event.seq = seq
        self.last_seq = seq
        self._batch.extend(events)
        if len(self._batch) >= self.batch_size:
            self.deliver()

    def mark(self, position: Position | None, dump: Dump | None = None,
             seq: int | None = None) -> None:
        """A commit point at ``seq`` (default: the last emitted event).

        Consecutive plain points are merged into the newest, except a point a flush was
        already asked to cover: outputs on their own thread acknowledge one flush behind, and
        a point always moved past the last flush would never be acknowledged while the log
        keeps flowing (no commit at all while catching up on a backlog)."""
        point = CommitPoint(self.last_seq if seq is None else seq, position, dump)
        last = self._points[-1] if self._points else None
        if last is not None and last.dump is None and dump is None and \
                last.seq > self._flush_asked_seq:
            self._points[-1] = point
        else:
            self._points.append(point)

    def deliver(self) -> None:
        if not self._batch:
            return
        self._check_leader()
        batch, self._batch = self._batch, []
        self.metrics.delivered(batch)
        for sink in self.sinks:
            sink.write(batch)

    def commit(self, wait: bool = False) -> PipelineState:
        """Deliver, ask every output to flush, and commit state up to the common
        acknowledgement (``wait``: of everything delivered, waiting for the flushes)."""
        self.deliver()
        self._check_leader()  # a frozen leader resumed between deliver and flush
        checkpoint = self._checkpoint()
        self._flush_asked_seq = self.last_seq
        if wait:
            acks = {sink.name: sink.sync(checkpoint) for sink in self.sinks}
        else:
            for sink in self.sinks:
                sink.request_flush(checkpoint)
            acks = {sink.name: sink.acknowledged() for sink in self.sinks}
        done, self._points = split_acknowledged(self._points, min_acknowledged(acks))
        self._asked_points = len(self._points)  # the flush just asked covers all of them
        if done:
            self.save(apply_points(self.state, done))
        return self.state

    def settle(self) -> None:
        """Commit state up to what the outputs acknowledged since the last commit, without
        asking for a flush. An output on its own thread answers the flush asked at one
        commit after that commit returned; waiting for the next commit to see the answer
        would keep the committed position a whole ``flush_interval_s`` older than needed
        (the MariaDB sustained-load bench measured its lag at 1-2 s for a 1 s interval).
        Cheap when nothing new was acknowledged: the engine calls it every loop turn."""
        asked = self._asked_points
        if not asked:
            return
        acked = min_acknowledged({sink.name: sink.acknowledged() for sink in self.sinks})
        if acked < self._points[0].seq:
            return
        # only points a flush was asked to cover: a later point at the same seq (a position
        # moved without events) is not in the checkpoint that flush committed
        self._check_leader()  # as commit(): a deposed leader commits nothing more
        done, waiting = split_acknowledged(self._points[:asked], acked)
        self._points = waiting + self._points[asked:]
        self._asked_points = len(waiting)
        self.save(apply_points(self.state, done))

    def _checkpoint(self) -> Checkpoint | None:
        """The state after every pending commit point (all are at or below what was handed
        to the outputs), for outputs that commit it with their data."""
        if not self._points or not any(isinstance(o, CheckpointingOutput)
                                       for o in self.outputs):
            return None
        state = apply_points(self.state, self._points)
        return Checkpoint(self.pipeline, self.epoch, state_to_json(state))

    def save(self, state: PipelineState) -> None:
        if state == self.state and self.version is not None:
            return
        self._check_leader()
        self.version = self.store.save(state_to_json(state), self.version, self.epoch)
        previous, self.state = self.state, state
        if self.on_commit and state.position is not None and state.position != previous.position:
            self.on_commit(state.position)

    def update_committed(self, change: Callable[[PipelineState], PipelineState]) -> None:
        """Apply a control change (new dump, pause, cancel) to the committed state at once."""
        self.save(change(self.state))

    def pending_points(self) -> int:
        return len(self._points)

    def pending(self) -> bool:
        """Whether anything emitted or marked is not committed yet."""
        return bool(self._batch) or bool(self._points)

    def close(self) -> None:
        self.on_commit = None  # the run's log reader closes with it
        leader = self.is_leader()
        for sink in self.sinks:
            try:
                if leader:
                    sink.close()
                else:
                    sink.discard()  # a deposed leader must not write out what it buffers
            except Exception:  # closing is best effort; what was acknowledged is committed
                log.exception("closing output %s failed", sink.name)
        self.sinks = []


def _check_sole(outputs: Sequence[Output]) -> None:
    """Refuse, at start, an output that must be the pipeline's only one beside others."""
    sole = [o.name for o in outputs if isinstance(o, SoleOutput) and o.needs_to_be_sole()]
    if sole and len(outputs) > 1:
        raise ConfigError(
            f"output {sole[0]} must be the pipeline's only output (it skips what it holds by "
            f"sequence number, and a replay after a crash may number other outputs' events "
            f"differently); this pipeline has {len(outputs)}",
            fix="run it in a pipeline of its own, or use delivery: at-least-once beside other "
                "outputs")
