"""Test doubles shipped with dblog: an in-memory source, list outputs, a memory state store, a
fake clock, and a replay helper that applies a stream to a dict (the I3 check).

The in-memory source keeps tables as dicts and a log list; committing a transaction appends
its changes to the log in commit order, just as a database's log would. Watermark writes are
log entries too, so the engine's windows close exactly as they do against a real server.
"""

from dblog.testing.clock import FakeClock
from dblog.testing.outputs import ListOutput, TransactionalListOutput
from dblog.testing.replay import replay
from dblog.testing.source import (
    LogOffset,
    MemoryChunkReader,
    MemoryConnector,
    MemoryDatabase,
    MemoryLogReader,
    MemoryPendingWindow,
    MemoryTable,
    MemoryWatermarkWriter,
    MemoryWindowChunkReader,
)
from dblog.testing.state import MemoryStateStore

__all__ = [
    "FakeClock",
    "ListOutput",
    "LogOffset",
    "MemoryChunkReader",
    "MemoryConnector",
    "MemoryDatabase",
    "MemoryLogReader",
    "MemoryPendingWindow",
    "MemoryStateStore",
    "MemoryTable",
    "MemoryWatermarkWriter",
    "MemoryWindowChunkReader",
    "TransactionalListOutput",
    "replay",
]
