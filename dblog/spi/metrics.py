"""What the engine tells about itself while it runs: events delivered, output call times and
failures, and when the log reader last had nothing more to read (for the lag figure).

The engine calls a :class:`MetricsSink` from its own thread, once per delivered batch and once
per output call, never per event, so counting costs little next to the outputs' work.
:class:`Counters` is the sink the engine uses unless it is given another: it keeps running
totals that :meth:`Counters.snapshot` hands to ``Engine.status()`` (and from there to the HTTP
API's Prometheus endpoint, which reads them at scrape time).
"""

from __future__ import annotations

import datetime
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from dblog.core.model import ChangeEvent, Op


@runtime_checkable
class MetricsSink(Protocol):
    def delivered(self, events: Sequence[ChangeEvent]) -> None:
        """A batch of emitted events was handed to every output."""

    def output_call(self, output: str, action: str, seconds: float, failed: bool) -> None:
        """One call to an output (``write``, ``flush``, ``open``) took ``seconds``; ``failed``
        if it raised (it may be retried)."""

    def caught_up(self) -> None:
        """The log reader had nothing more to read: the stream is at the source's head."""

    def chunk_discarded(self, table: object, reason: str) -> None:
        """A chunk of ``table`` was given up for ``reason`` and is read again."""

    def snapshot(self) -> dict[str, Any]:
        """The figures so far, as plain JSON values (any thread)."""
        ...


def commit_time(text: str | None) -> float | None:
    """A commit timestamp as the sources give it (ISO 8601 text, PostgreSQL's ``+00`` offset
    included) in seconds since the epoch; None when absent or unreadable."""
    if not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


class Counters:
    """Running totals, updated on the engine thread and read from any thread.

    Lag: ``now`` against the later of the commit time of the last emitted transaction and
    the last moment the log reader came back empty. A source that is idle (the engine's
    heartbeat watermark writes still move its log) reads as caught up, not as lagging by
    the age of its last transaction; a reader that never comes back empty falls behind by
    the age of what it emits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: Counter[tuple[Op, Any]] = Counter()
        self.batches = 0
        self.output_seconds: dict[tuple[str, str], float] = {}
        self.output_calls: Counter[tuple[str, str]] = Counter()
        self.output_failures: Counter[tuple[str, str]] = Counter()
        self.discards: Counter[tuple[str, str]] = Counter()
        self.last_commit_ts: str | None = None
        self.caught_up_at: float | None = None
        self.started_at = time.time()

    def delivered(self, events: Sequence[ChangeEvent]) -> None:
        counts, last = _runs(events)
        with self._lock:
            self.events.update(counts)
            self.batches += 1
            if last is not None and last.commit_ts is not None:
                self.last_commit_ts = last.commit_ts

    def output_call(self, output: str, action: str, seconds: float, failed: bool) -> None:
        with self._lock:
            self.output_calls[output, action] += 1
            self.output_seconds[output, action] = \
                self.output_seconds.get((output, action), 0.0) + seconds
            if failed:
                self.output_failures[output, action] += 1

    def caught_up(self) -> None:
        self.caught_up_at = time.time()

    def chunk_discarded(self, table: object, reason: str) -> None:
        with self._lock:
            self.discards[str(table), reason] += 1

    def forget_lag(self) -> None:
        """Drop the marks the lag is measured from (a new leadership term starts: it reads
        from the committed position, not from where this instance stopped last time)."""
        with self._lock:
            self.last_commit_ts, self.caught_up_at = None, None

    def lag_seconds(self, now: float | None = None) -> float | None:
        """Seconds behind the source (None before anything was read or emitted)."""
        now = time.time() if now is None else now
        marks = [t for t in (commit_time(self.last_commit_ts), self.caught_up_at)
                 if t is not None]
        return max(0.0, now - max(marks)) if marks else None

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            events = [{"op": op.value, "table": None if table is None else str(table),
                       "count": n} for (op, table), n in self.events.items()]
            outputs = [{"output": o, "action": a, "calls": n,
                        "seconds": self.output_seconds.get((o, a), 0.0),
                        "failures": self.output_failures[o, a]}
                       for (o, a), n in self.output_calls.items()]
            discards = [{"table": table, "reason": reason, "count": n}
                        for (table, reason), n in self.discards.items()]
            batches, last_ts = self.batches, self.last_commit_ts
        return {"events": events, "batches": batches, "outputs": outputs, "discards": discards,
                "last_commit_ts": last_ts, "caught_up_at": self.caught_up_at,
                "lag_s": self.lag_seconds()}


def _runs(events: Sequence[ChangeEvent]
          ) -> tuple[Counter[tuple[Op, Any]], ChangeEvent | None]:
    """Events per (op, table), counted by runs, and the last COMMIT. A batch is mostly long
    runs of one op on one table object (a chunk's rows): hashing a TableId per event and
    scanning for the COMMIT cost the engine thread more than encoding the events did (0.38 s
    of a 300,000-row dump)."""
    counts: Counter[tuple[Op, Any]] = Counter()
    op: Op | None = None
    table: Any = None
    run = 0
    last: ChangeEvent | None = None
    for event in events:
        if event.op is op and event.table is table:
            run += 1
            continue
        if run and op is not None:
            counts[op, table] += run
        op, table, run = event.op, event.table, 1
        if op is Op.COMMIT:  # counted alone: the next event starts a new run
            counts[op, table] += 1
            last, op, run = event, None, 0
    if run and op is not None:
        counts[op, table] += run
    return counts, last
