"""Leadership as a lease: pure state, no ZooKeeper (unit-tested with a fake clock).

The leader holds an ephemeral znode tied to its ZooKeeper session. The server expires the session
``session_timeout`` after it last heard from the client, so a successful round trip *sent* at
``t`` proves the session (and leadership) alive until ``t + session_timeout`` at the earliest.
The lease trusts leadership only for a fraction of that (``duration_s``) after the last such
proof, so a process that was frozen (SIGSTOP, a long GC pause, a partition) finds its lease
expired the moment it runs again, before its connection listener has even noticed anything.

States: CANDIDATE (not leading) -> LEADER (acquired) -> SUSPENDED (connection in doubt: nothing
is emitted) -> LEADER again (same session reconnected, leader znode still ours) or LOST (session
expired or znode gone: the pipeline stops, the instance campaigns again).
"""

from __future__ import annotations

import threading
from enum import Enum

from dblog.spi import Clock


class LeaseState(str, Enum):
    CANDIDATE = "candidate"
    LEADER = "leader"
    SUSPENDED = "suspended"
    LOST = "lost"


class Lease:
    """Thread-safe: the connection listener, the renewer and the engine share one lease."""

    def __init__(self, clock: Clock, duration_s: float) -> None:
        if duration_s <= 0:
            raise ValueError("a lease needs a positive duration")
        self.clock = clock
        self.duration_s = duration_s
        self._lock = threading.Lock()
        self._state = LeaseState.CANDIDATE
        self._epoch = 0
        self._renewed_at = float("-inf")

    def set_duration(self, duration_s: float) -> None:
        """Change how long a proof of leadership is trusted (the session timeout the server
        negotiated may differ from the one requested, and is known only once connected)."""
        if duration_s <= 0:
            raise ValueError("a lease needs a positive duration")
        with self._lock:
            self.duration_s = duration_s

    @property
    def state(self) -> LeaseState:
        return self._state

    @property
    def epoch(self) -> int:
        return self._epoch

    def acquire(self, epoch: int, sent_at: float) -> None:
        """Elected with ``epoch`` by a request sent at ``sent_at`` (monotonic)."""
        with self._lock:
            self._state, self._epoch, self._renewed_at = LeaseState.LEADER, epoch, sent_at

    def snapshot(self) -> tuple[LeaseState, int]:
        """The state and the epoch of the term, read together (a renewal is tagged with
        them, so that its answer is applied only to the term it was made for)."""
        with self._lock:
            return self._state, self._epoch

    def _term(self, epoch: int | None) -> bool:
        """Whether an answer tagged with ``epoch`` (None: untagged) is about this term."""
        return epoch is None or epoch == self._epoch

    def renew(self, sent_at: float, epoch: int | None = None) -> None:
        """A round trip sent at ``sent_at`` confirmed the leader znode is still ours."""
        with self._lock:
            if self._state is LeaseState.LEADER and self._term(epoch):
                self._renewed_at = max(self._renewed_at, sent_at)

    def suspend(self) -> None:
        """The connection is in doubt: stop emitting now."""
        with self._lock:
            if self._state is LeaseState.LEADER:
                self._state = LeaseState.SUSPENDED

    def reconnected(self, still_owner: bool, sent_at: float, epoch: int | None = None) -> None:
        """The same session is connected again; ``still_owner``: the znode is still ours."""
        with self._lock:
            if self._state is not LeaseState.SUSPENDED or not self._term(epoch):
                return
            if still_owner:
                self._state, self._renewed_at = LeaseState.LEADER, sent_at
            else:
                self._state = LeaseState.LOST

    def lose(self, epoch: int | None = None) -> None:
        """The session expired or the znode is gone: leadership is over. With ``epoch``,
        only if that is still the term's epoch (a renewal made for an earlier term that
        answers after a new term began changes nothing)."""
        with self._lock:
            if self._state in (LeaseState.LEADER, LeaseState.SUSPENDED) and self._term(epoch):
                self._state = LeaseState.LOST

    def reset(self) -> None:
        """Back to candidate (after the pipeline of a lost term stopped)."""
        with self._lock:
            self._state, self._renewed_at = LeaseState.CANDIDATE, float("-inf")

    def valid(self) -> bool:
        """Whether this instance may emit and commit right now."""
        with self._lock:
            return (self._state is LeaseState.LEADER
                    and self.clock.monotonic() - self._renewed_at < self.duration_s)

    def held(self) -> bool:
        """Leader or suspended: the term is not over (it may still resume)."""
        return self._state in (LeaseState.LEADER, LeaseState.SUSPENDED)

    def expired(self) -> bool:
        """A LEADER whose lease ran out without renewal (a frozen process, a slow server)."""
        with self._lock:
            return (self._state is LeaseState.LEADER
                    and self.clock.monotonic() - self._renewed_at >= self.duration_s)
