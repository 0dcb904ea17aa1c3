"""The ZooKeeper state store (kazoo), its znode layout, and the one place kazoo errors are
classified.

Layout under ``<root>/<pipeline name>``::

    leader      ephemeral: the current leader ({"instance", "since", "epoch"})
    epoch       the leader epoch is this znode's version, bumped with the leader's creation
    state       {"epoch": n, "data": <pipeline state>}; its znode version is the state version
    requests/   queued dump requests (persistent sequential), consumed by the leader
    rejected/   requests the leader could not accept, with the reason

A save is compare-and-set on the state znode's version and, with ``fenced=True``, checks in the
same ZooKeeper transaction that the epoch znode still has the writer's epoch: a deposed leader's
write is rejected by ZooKeeper itself even before its successor wrote anything.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError

from dblog.errors import (
    DblogError,
    FencedError,
    LeadershipLost,
    RetryableStateError,
    StateError,
)
from dblog.spi import StoredState
from dblog.state import check_fence
from dblog.state.codec import checked_document

log = logging.getLogger("dblog.ha")
MAX_STATE_BYTES = 1_000_000
"""ZooKeeper's default jute.maxbuffer is 1 MiB per znode."""

_RETRYABLE = (ConnectionLoss, ConnectionClosedError, OperationTimeoutError, KazooTimeoutError)


def classify(exc: BaseException, doing: str) -> DblogError:
    """The dblog error for a kazoo error raised while ``doing`` something."""
    if isinstance(exc, DblogError):
        return exc
    if isinstance(exc, SessionExpiredError):
        return LeadershipLost(f"{doing}: the ZooKeeper session expired")
    if isinstance(exc, _RETRYABLE):
        return RetryableStateError(f"{doing}: ZooKeeper unavailable ({type(exc).__name__})")
    return StateError(f"{doing}: {type(exc).__name__}: {exc}",
                      fix="check state.hosts, state.root and the ZooKeeper ACLs")


@contextmanager
def classified(doing: str) -> Iterator[None]:
    try:
        yield
    except (KazooException, KazooTimeoutError) as exc:
        raise classify(exc, doing) from exc


@dataclass(frozen=True)
class ZkPaths:
    base: str

    @classmethod
    def of(cls, root: str, name: str) -> ZkPaths:
        return cls(f"{root.rstrip('/')}/{name}")

    @property
    def leader(self) -> str:
        return f"{self.base}/leader"

    @property
    def epoch(self) -> str:
        return f"{self.base}/epoch"

    @property
    def state(self) -> str:
        return f"{self.base}/state"

    @property
    def requests(self) -> str:
        return f"{self.base}/requests"

    @property
    def rejected(self) -> str:
        return f"{self.base}/rejected"


def spread_hosts(hosts: str, at_least: int = 3) -> str:
    """``hosts`` with its server list repeated to at least ``at_least`` entries.

    kazoo waits ``session timeout / number of hosts`` for the answer to a connect request. A
    server that accepts the socket but never answers (ZooKeeper 3.8 leaks connections that
    arrive while it starts up) would cost a one-server client its whole session; listed three
    times, a hung attempt gives up after a third of it and the next attempt still saves the
    session."""
    servers, slash, chroot = hosts.partition("/")
    entries = [h for h in servers.split(",") if h.strip()]
    if not entries:
        return hosts
    repeat = -(-at_least // len(entries))
    return ",".join(entries * repeat) + slash + chroot


class _RecordingConnect:
    """Wraps kazoo's ``ConnectionHandler._connect``, which returns the read and connect
    timeouts (ms) of a new connection, the read timeout being 2/3 of the session timeout the
    server negotiated (kazoo 2.x); kazoo keeps that value nowhere else."""

    def __init__(self, connect: Any) -> None:
        self.connect = connect
        self.negotiated_s: float | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = self.connect(*args, **kwargs)
        try:
            self.negotiated_s = round(float(result[0]) * 1.5) / 1000.0
        except (TypeError, ValueError, IndexError, KeyError):
            # another kazoo's return shape: never break its connect; the lease then
            # follows the requested timeout (effective_timeout_s)
            log.warning("cannot read the negotiated ZooKeeper session timeout from %r",
                        result)
        return result


def track_session_timeout(client: KazooClient) -> bool:
    """Record the session timeout ZooKeeper negotiates at each connect of ``client`` (it clamps
    the requested one to [minSessionTimeout, maxSessionTimeout]); False when this kazoo has
    no connect step to observe. Idempotent; takes effect from the next connect."""
    connection: Any = getattr(client, "_connection", None)
    current = getattr(connection, "_connect", None)
    if current is None:
        return False
    if not isinstance(current, _RecordingConnect):
        connection._connect = _RecordingConnect(current)
    return True


def negotiated_timeout_s(client: KazooClient) -> float | None:
    """The session timeout (s) negotiated at the latest connect, None when not tracked."""
    recording = getattr(getattr(client, "_connection", None), "_connect", None)
    return recording.negotiated_s if isinstance(recording, _RecordingConnect) else None


def probe_session_timeout(client: KazooClient, requested_s: float,
                          timeout_s: float = 5.0) -> float | None:
    """The session timeout the servers of an already connected ``client`` negotiate for
    ``requested_s``, read through a short-lived second session; None if none answers."""
    hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in client.hosts)
    probe = KazooClient(hosts=hosts, timeout=requested_s)
    track_session_timeout(probe)
    try:
        probe.start(timeout=timeout_s)
    except KazooTimeoutError:
        return None
    finally:
        probe.stop()
        probe.close()
    return negotiated_timeout_s(probe)


def connect(hosts: str, session_timeout_s: float, connect_timeout_s: float = 15.0,
            **kwargs: Any) -> KazooClient:
    """A started kazoo client, tracking its negotiated session timeout
    (:func:`negotiated_timeout_s`); raises RetryableStateError when no server answers in
    time."""
    client = KazooClient(hosts=spread_hosts(hosts), timeout=session_timeout_s,
                         connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1.0},
                         **kwargs)
    track_session_timeout(client)
    try:
        client.start(timeout=connect_timeout_s)
    except KazooTimeoutError as exc:
        client.close()
        raise RetryableStateError(f"no ZooKeeper server answered at {hosts} within "
                                  f"{connect_timeout_s:.0f}s",
                                  fix="check state.hosts and that ZooKeeper runs") from exc
    return client


def ensure_layout(client: KazooClient, paths: ZkPaths) -> None:
    with classified("creating the ZooKeeper layout"):
        for path in (paths.requests, paths.rejected):
            client.ensure_path(path)
        with suppress(NodeExistsError):
            client.create(paths.epoch, b"0")


def _damaged_fix(paths: ZkPaths) -> str:
    return (f"restore the data of {paths.state} from a backup; or, to start over, stop every "
            f"instance, delete that znode (zkCli.sh: delete {paths.state}; a jsonl output that "
            "holds events then needs reset: true for that start) and request a full dump")


class ZooKeeperStateStore:
    """A :class:`dblog.spi.StateStore` in one znode."""

    def __init__(self, client: KazooClient, paths: ZkPaths, *, fenced: bool = False) -> None:
        self.client = client
        self.paths = paths
        self.fenced = fenced
        ensure_layout(client, paths)

    def _read(self) -> tuple[dict[str, Any], int] | None:
        try:
            raw, stat = self.client.get(self.paths.state)
        except NoNodeError:
            return None
        where = f"state znode {self.paths.state}"
        try:
            doc = json.loads((raw or b"").decode("utf-8"))
        except ValueError as exc:  # UnicodeDecodeError too
            raise StateError(f"{where} is damaged: not valid JSON ({exc})",
                             fix=_damaged_fix(self.paths)) from exc
        return checked_document(doc, where, _damaged_fix(self.paths), versioned=False), \
            int(stat.version)

    def load(self) -> StoredState | None:
        with classified(f"reading {self.paths.state}"):
            current = self._read()
        if current is None:
            return None
        doc, version = current
        return StoredState(version=version, data=doc["data"])

    def stored_epoch(self) -> int | None:
        with classified(f"reading {self.paths.state}"):
            current = self._read()
        return None if current is None else int(current[0].get("epoch", 0))

    def save(self, data: dict[str, object], expected_version: int | None, epoch: int) -> int:
        body = json.dumps({"epoch": epoch, "data": data}, ensure_ascii=False).encode("utf-8")
        if len(body) > MAX_STATE_BYTES:
            raise StateError(f"the state is {len(body)} bytes, over ZooKeeper's 1 MiB znode limit",
                             fix="cancel or finish queued dumps (large key lists)")
        with classified(f"writing {self.paths.state}"):
            current = self._read()
            self._check(current, expected_version, epoch)
            return self._commit(body, expected_version, epoch)

    def _check(self, current: tuple[dict[str, Any], int] | None, expected: int | None,
               epoch: int) -> None:
        version = None if current is None else current[1]
        stored_epoch = -1 if current is None else int(current[0].get("epoch", 0))
        check_fence(version, stored_epoch, expected, epoch, self.paths.state)

    def _commit(self, body: bytes, expected: int | None, epoch: int) -> int:
        tx = self.client.transaction()
        if self.fenced:
            tx.check(self.paths.epoch, epoch)
        if expected is None:
            tx.create(self.paths.state, body)
        else:
            tx.set_data(self.paths.state, body, version=expected)
        results = tx.commit()
        failures = [r for r in results if isinstance(r, Exception)
                    and not isinstance(r, RolledBackError)]
        if failures:
            raise _rejected(failures[0], self.fenced and isinstance(results[0], BadVersionError),
                            epoch, self.paths)
        last = results[-1]
        return 0 if expected is None else int(last.version)


def _rejected(error: Exception, epoch_moved: bool, epoch: int, paths: ZkPaths) -> DblogError:
    if epoch_moved:
        return FencedError(f"state write with epoch {epoch} rejected by ZooKeeper: a newer "
                           f"leader was elected for {paths.base}")
    if isinstance(error, (BadVersionError, NodeExistsError, NoNodeError)):
        return FencedError(f"state write rejected by ZooKeeper ({type(error).__name__}): "
                           f"another writer changed {paths.state}")
    return classify(error, f"writing {paths.state}")
