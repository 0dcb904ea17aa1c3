"""The contracts between the core and everything that touches a driver.

The core (engine, window, dumps, acknowledgements) depends only on these protocols:

* :mod:`dblog.spi.source`: the source connector and its roles (log reader, chunk reader,
  watermark writer) and their optional abilities (:class:`WakeableLogReader`,
  :class:`WindowChunkReader`, :class:`LocatedPosition`);
* :mod:`dblog.spi.sink`: outputs and their optional abilities (:class:`FencedOutput`,
  :class:`DiscardingOutput`, :class:`PreEncodingOutput`);
* :mod:`dblog.spi.findings`: what ``dblog check`` reports (:class:`Finding`, :class:`Checkable`);
* :mod:`dblog.spi.state`: the state store; :mod:`dblog.spi.runtime`: clock and leader election;
* :mod:`dblog.spi.control`: control of a running capture (dumps, knobs, status).

Optional abilities are ``runtime_checkable`` protocols, tested with ``isinstance``.
Implementations live in ``dblog.connectors.*``, ``dblog.outputs.*``, ``dblog.state``,
``dblog.ha`` and ``dblog.testing`` (in-memory doubles).
"""

from dblog.spi.control import Control, DumpRequest
from dblog.spi.findings import Checkable, Finding
from dblog.spi.runtime import Clock, LeaderElection
from dblog.spi.sink import (
    Checkpoint,
    CheckpointingOutput,
    DiscardingOutput,
    EncodedBatch,
    FencedOutput,
    FreshStartAware,
    Output,
    PipelineBound,
    PreEncodingOutput,
    SoleOutput,
    TableAwareOutput,
)
from dblog.spi.source import (
    Chunk,
    ChunkReader,
    ForgettingChunkReader,
    KeyListParser,
    LocatedPosition,
    LogReader,
    PendingWindow,
    SourceConnector,
    WakeableLogReader,
    WatermarkWriter,
    WindowChunkReader,
)
from dblog.spi.state import StateStore, StoredState

__all__ = [
    "Checkable",
    "Checkpoint",
    "CheckpointingOutput",
    "Chunk",
    "ChunkReader",
    "Clock",
    "Control",
    "DiscardingOutput",
    "DumpRequest",
    "EncodedBatch",
    "FencedOutput",
    "Finding",
    "ForgettingChunkReader",
    "FreshStartAware",
    "KeyListParser",
    "LeaderElection",
    "LocatedPosition",
    "LogReader",
    "Output",
    "PendingWindow",
    "PipelineBound",
    "PreEncodingOutput",
    "SoleOutput",
    "SourceConnector",
    "StateStore",
    "StoredState",
    "TableAwareOutput",
    "WakeableLogReader",
    "WatermarkWriter",
    "WindowChunkReader",
]
