"""Engine settings (one model, one set of defaults: the YAML ``engine:`` section is this model),
the knobs that change at run time, and the test seams."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from dblog.core.dumps import ChunkPlan

MAX_CHUNK_SIZE = 1_000_000


class EngineSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    chunk_size: int = Field(1000, ge=1, le=MAX_CHUNK_SIZE)
    """Rows per chunk SELECT (changeable while running: ``dblog set``)."""
    chunk_delay_s: float = Field(0.0, ge=0)
    """Pause between chunks (changeable while running)."""
    batch_size: int = Field(2000, ge=1)
    """Events handed to the outputs at once."""
    flush_interval_s: float = Field(1.0, ge=0)
    """Outputs are flushed and the state committed at least this often (0: every turn)."""
    poll_timeout_s: float = Field(0.2, ge=0)
    """Longest wait for the log in one loop turn (0: never wait, for tests)."""
    heartbeat_interval_s: float = Field(10.0, gt=0)
    """Watermark heartbeat writes: keep windows closing and the slot moving on an idle source."""
    window_timeout_s: float = Field(120.0, gt=0)
    """A window whose watermark is not seen for this long while the log is idle is an error."""
    progress_interval_s: float = Field(10.0, gt=0)
    """How often a running dump's progress is logged."""
    chunk_worker: bool = True
    """Read the next chunk (L, SELECT, H) while this chunk's rows are emitted. False: every
    chunk is read in the engine thread (deterministic, for tests)."""
    tune_gc: bool = True
    """Raise the garbage collector's young-generation threshold (process-wide) for throughput;
    embedders that manage the collector themselves set False."""
    switch_interval_s: float | None = Field(0.0005, gt=0)
    """With ``chunk_worker``: the interpreter's thread switch interval while the engine runs
    (process-wide, restored on exit; None leaves it alone). The worker waits on the database
    for most of a chunk; the default 5 ms let it wait that long again for the interpreter lock
    while the engine thread emits rows, which halved dump throughput."""
    output_threads: bool = True
    """Each output works from a bounded queue on its own thread, so its round trips (writes,
    fsyncs, broker replies) do not hold the log loop. False: outputs are called on the engine
    thread (deterministic, for tests)."""
    output_queue_batches: int = Field(4, ge=1)
    """Batches queued per output at most; a slow output then slows capture (bounded memory)."""
    recent_keys: int = Field(50_000, ge=0)
    """Keys of recently forwarded transactions kept for the snapshot guard (memory bound)."""
    initial_dumps: tuple[tuple[str, ...] | None, ...] = ()
    """Dumps requested on the very first start (no state yet); None: all captured tables. In
    YAML this is the top-level ``initial_dumps`` list."""
    initial_dumps_skip_unavailable: bool = False
    """An ``initial_dumps`` table that does not exist or cannot be dumped (no key) refuses the
    start (nothing is stored, so a corrected config dumps everything); True leaves such tables
    out, with a warning per table."""


@dataclass
class Knobs:
    """The settings an operator changes while the engine runs (read by the scheduler)."""

    chunk_size: int
    chunk_delay_s: float

    @classmethod
    def of(cls, settings: EngineSettings) -> Knobs:
        return cls(settings.chunk_size, settings.chunk_delay_s)


@dataclass
class PhaseHooks:
    """Test seams: called right after the low watermark and right before the high watermark."""

    after_low: Callable[[ChunkPlan], None] | None = None
    before_high: Callable[[ChunkPlan], None] | None = None
