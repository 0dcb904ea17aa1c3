"""Leader election through ZooKeeper (kazoo), as a lease (see :mod:`dblog.ha.lease`).

A candidate creates the ephemeral ``leader`` znode and bumps the ``epoch`` znode's version in one
ZooKeeper transaction, so every leadership term has its own, larger epoch. Standbys wait for the
``leader`` znode to go away (its owner's session ended). While leading, a renewer thread checks
the znode is still owned by this session every ``session_timeout / 8`` and renews the lease; the
connection listener suspends it at once on SUSPENDED and ends it on LOST.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from dblog.errors import DblogError, StateError
from dblog.ha.lease import Lease, LeaseState
from dblog.ha.zk import (
    ZkPaths,
    classified,
    ensure_layout,
    negotiated_timeout_s,
    probe_session_timeout,
    track_session_timeout,
)
from dblog.spi import Clock

log = logging.getLogger("dblog.ha")


def default_instance_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class ZooKeeperElection:
    """A :class:`dblog.spi.LeaderElection`; :meth:`campaign` blocks until elected."""

    def __init__(self, client: KazooClient, paths: ZkPaths, clock: Clock, *,
                 session_timeout_s: float, instance_id: str | None = None) -> None:
        self.client = client
        self.paths = paths
        self.clock = clock
        self.instance_id = instance_id or default_instance_id()
        self.session_timeout_s = session_timeout_s
        """The requested session timeout; the lease follows the negotiated one."""
        self._probed_s = self._learn_session_timeout()
        self._warned_s: float | None = None
        self.lease = Lease(clock, duration_s=self.effective_timeout_s() / 2)
        self._closed = threading.Event()
        ensure_layout(client, paths)
        client.add_listener(self._on_state)
        self._renewer = threading.Thread(target=self._renew_loop, name="dblog-lease", daemon=True)
        self._renewer.start()

    # -- LeaderElection -------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self.lease.epoch

    def is_leader(self) -> bool:
        return self.lease.valid()

    # -- the session timeout ---------------------------------------------------------------

    def _learn_session_timeout(self) -> float | None:
        """Track the negotiated session timeout from the client's next connects; for a client
        connected before (not made by :func:`dblog.ha.zk.connect`), learn it now through a
        short probe session."""
        if not track_session_timeout(self.client):
            if isinstance(self.client, KazooClient):
                raise StateError(
                    "cannot read the session timeout ZooKeeper negotiates from this kazoo "
                    "version, so the leader's lease cannot be bounded by it",
                    fix="install a kazoo 2.x release (pip install 'dblog[zookeeper]')")
            return None  # a test double
        if negotiated_timeout_s(self.client) is None and self.client.connected:
            return probe_session_timeout(self.client, self.session_timeout_s)
        return None

    def effective_timeout_s(self) -> float:
        """The session timeout the server negotiated (latest connect), else the requested."""
        negotiated = negotiated_timeout_s(self.client) or self._probed_s
        return negotiated or self.session_timeout_s

    def _fit_lease(self) -> None:
        """Keep the lease at half the negotiated session timeout; say so once when the server
        granted less than was asked for."""
        session_s = self.effective_timeout_s()
        self.lease.set_duration(session_s / 2)
        if session_s < self.session_timeout_s and self._warned_s != session_s:
            self._warned_s = session_s
            log.warning("ZooKeeper granted a session timeout of %.1fs, less than "
                        "state.session_timeout_s (%.1fs): the server's maxSessionTimeout is "
                        "lower; the leader's lease lasts %.1fs and a dead leader is replaced "
                        "after about %.1fs (lower state.session_timeout_s or raise "
                        "maxSessionTimeout)", session_s, self.session_timeout_s,
                        session_s / 2, session_s)

    # -- campaign -------------------------------------------------------------------------

    def campaign(self, stop: threading.Event) -> int | None:
        """Block until this instance leads (return the epoch) or ``stop`` is set (None)."""
        self.lease.reset()
        while not stop.is_set() and not self._closed.is_set():
            try:
                epoch = self._try_lead()
                if epoch is not None:
                    return epoch
                self._wait_for_vacancy(stop)
            except (KazooException, KazooTimeoutError) as exc:
                log.warning("campaign: ZooKeeper unavailable (%s); retrying", type(exc).__name__)
                stop.wait(0.5)
        return None

    def _try_lead(self) -> int | None:
        _, stat = self.client.get(self.paths.epoch)
        epoch = int(stat.version) + 1
        info = {"instance": self.instance_id, "since": time.time(), "epoch": epoch}
        self._fit_lease()
        sent_at = self.clock.monotonic()
        tx = self.client.transaction()
        tx.create(self.paths.leader, json.dumps(info).encode(), ephemeral=True)
        tx.set_data(self.paths.epoch, str(epoch).encode(), version=stat.version)
        results = tx.commit()
        if isinstance(results[0], NodeExistsError):
            return self._claim_own_znode()
        if any(isinstance(r, (NodeExistsError, BadVersionError)) for r in results):
            return None
        failure = next((r for r in results if isinstance(r, Exception)), None)
        if failure is not None:
            raise failure
        self.lease.acquire(epoch, sent_at)
        log.info("%s elected leader of %s with epoch %d", self.instance_id, self.paths.base,
                 epoch)
        return epoch

    def _claim_own_znode(self) -> int | None:
        """The ``leader`` znode exists. It is this session's own when an earlier election
        transaction was applied but its reply was lost (kazoo raised ConnectionLoss and the
        same session reconnected): then this candidate won, with the epoch in the znode."""
        session = self._session_id()
        sent_at = self.clock.monotonic()
        try:
            raw, stat = self.client.get(self.paths.leader)
        except NoNodeError:
            return None
        if session is None or stat.ephemeralOwner != session:
            return None
        epoch = int(json.loads(raw.decode("utf-8"))["epoch"])
        self._fit_lease()
        self.lease.acquire(epoch, sent_at)
        log.info("%s elected leader of %s with epoch %d (the leader znode is this session's "
                 "own: the reply to its election was lost)", self.instance_id,
                 self.paths.base, epoch)
        return epoch

    def _wait_for_vacancy(self, stop: threading.Event) -> None:
        """Wait for the leader znode to go, at most a second: a watch set by a session that
        expires meanwhile never fires, so the campaign loop looks again regularly."""
        gone = threading.Event()
        session = self._session_id()
        stat = self.client.exists(self.paths.leader, watch=lambda _event: gone.set())
        if stat is None or (session is not None and stat.ephemeralOwner == session):
            return  # vacant, or this session's own (the campaign loop claims it)
        deadline = self.clock.monotonic() + 1.0
        while not gone.is_set() and not stop.is_set() and self.clock.monotonic() < deadline:
            gone.wait(0.1)

    def resign(self) -> None:
        """Give up leadership now (a clean stop): delete the znode if this session owns it."""
        self.lease.lose()
        try:
            with classified("resigning"):
                owned = self._owned()
                if owned:
                    self.client.delete(self.paths.leader)
            if owned is None:
                log.warning("could not resign cleanly (not connected to ZooKeeper); the "
                            "session expiry will")
        except DblogError as exc:
            log.warning("could not resign cleanly (%s); the session expiry will", exc)

    def close(self) -> None:
        self._closed.set()
        self.client.remove_listener(self._on_state)

    # -- keeping the lease ----------------------------------------------------------------

    def _on_state(self, state: str) -> None:
        # runs in kazoo's thread: no blocking calls here
        if state == KazooState.SUSPENDED:
            if self.lease.state is LeaseState.LEADER:
                log.warning("ZooKeeper connection suspended: emission stops")
            self.lease.suspend()
        elif state == KazooState.LOST:
            if self.lease.held():
                log.warning("ZooKeeper session lost: leadership is over")
            self.lease.lose()

    def _session_id(self) -> int | None:
        """This client's session id; None while the connection is not live (kazoo's
        ``client_id`` is None then)."""
        client_id = self.client.client_id
        return None if client_id is None else int(client_id[0])

    def _owned(self) -> bool | None:
        """Whether this session owns the leader znode; None when that cannot be told (not
        connected). The session id is read before the znode, so a connection that drops
        while the read is answered still compares against this session."""
        session = self._session_id()
        if session is None:
            return None
        try:
            _, stat = self.client.get(self.paths.leader)
        except NoNodeError:
            return False
        return bool(stat.ephemeralOwner == session)

    def _renew_loop(self) -> None:
        while not self._closed.wait(self.effective_timeout_s() / 8):
            try:
                self._renew_once()
            except Exception:  # never let the renewer die: the lease would never renew again
                log.exception("lease renewal failed unexpectedly; retrying")

    def _renew_once(self) -> None:
        state, term = self.lease.snapshot()
        if state not in (LeaseState.LEADER, LeaseState.SUSPENDED):
            return
        if self.client.state != KazooState.CONNECTED:
            return
        self._fit_lease()
        sent_at = self.clock.monotonic()
        try:
            owned = self._owned()
        except (KazooException, KazooTimeoutError) as exc:
            log.debug("lease renewal failed: %s", exc)
            return
        if owned is not None:
            self._apply_renewal(state, term, owned, sent_at)

    def _apply_renewal(self, state: LeaseState, term: int, owned: bool, sent_at: float) -> None:
        """Apply the answer of a renewal made in the term of epoch ``term``; the lease ignores
        it when another term has begun meanwhile."""
        if self.lease.epoch != term:
            log.debug("ignoring a lease renewal of epoch %d (now %d)", term, self.lease.epoch)
        elif state is LeaseState.SUSPENDED:
            self.lease.reconnected(owned, sent_at, epoch=term)
            log.warning("ZooKeeper reconnected: leadership %s",
                        "kept" if owned else "lost")
        elif owned:
            self.lease.renew(sent_at, epoch=term)
        else:
            log.warning("the leader znode is no longer ours: leadership is over")
            self.lease.lose(epoch=term)


def read_leader(client: KazooClient, paths: ZkPaths) -> dict[str, Any] | None:
    """The current leader's znode data, or None."""
    try:
        raw, _ = client.get(paths.leader)
    except NoNodeError:
        return None
    info: dict[str, Any] = json.loads(raw.decode("utf-8"))
    return info
