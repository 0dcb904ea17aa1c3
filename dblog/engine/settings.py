"""Engine settings and test seams (re-exported by :mod:`dblog.engine`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dblog.core.dumps import ChunkPlan


@dataclass(frozen=True)
class EngineSettings:
    chunk_size: int = 1000
    chunk_delay_s: float = 0.0
    batch_size: int = 2000
    flush_interval_s: float = 1.0
    poll_timeout_s: float = 0.2
    heartbeat_interval_s: float = 10.0
    window_timeout_s: float = 120.0
    progress_interval_s: float = 10.0
    chunk_worker: bool = True
    """Read the next chunk (L, SELECT, H) in a worker thread while this chunk's rows are
    emitted. False: every chunk is read in the engine thread (deterministic, for tests)."""
    tune_gc: bool = True
    """Raise the garbage collector's young-generation threshold (process-wide) for throughput;
    embedders that manage the collector themselves set False."""
    switch_interval_s: float | None = 0.0005
    """With ``chunk_worker``: the interpreter's thread switch interval while the engine runs
    (process-wide, restored on exit; None leaves it alone). The worker waits on the database
    for most of a chunk; the default 5 ms let it wait that long again for the interpreter lock
    while the engine thread emits rows, which halved dump throughput."""
    recent_keys: int = 50_000
    """Keys of recently forwarded transactions kept for the snapshot guard (memory bound)."""
    initial_dumps: tuple[Sequence[str] | None, ...] = ()
    """Dumps requested on the very first start (no state yet); None: all captured tables."""


@dataclass
class PhaseHooks:
    """Test seams: called right after the low watermark and right before the high watermark."""

    after_low: Callable[[ChunkPlan], None] | None = None
    before_high: Callable[[ChunkPlan], None] | None = None
