"""HA with ZooKeeper: several ``dblog run`` candidates as OS processes share one ZooKeeper, one
source and one jsonl output. The leader is killed (SIGKILL), frozen (SIGSTOP past the session
timeout) or loses ZooKeeper for a while; the output still replays to the source (I1-I3)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from dblog.core.acks import PipelineState
from dblog.harness.postgres import HarnessError
from dblog.harness.zookeeper import ZooKeeperServer, start_zookeeper
from tests.conftest import unavailable

from .hautil import Cluster, check_output, keys_read_twice
from .pgutil import wait_until
from .workload import TABLES, Writers, create_schema

pytestmark = pytest.mark.integration
ROWS = 4000


@pytest.fixture()
def own_zk(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    try:
        server = start_zookeeper()
    except (HarnessError, OSError) as exc:
        unavailable("ZooKeeper", str(exc))
    try:
        yield server
    finally:
        (tmp_path / "zookeeper.log").write_text(server.log_tail(10**7))
        server.stop()


def _short_walsender_timeout(dsn: str) -> None:
    """A frozen leader's walsender holds the slot until wal_sender_timeout; keep it short (the
    deployment advice in docs/ha.md), scoped to this test's database."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        name = conn.info.dbname
        conn.execute(f'ALTER DATABASE "{name}" SET wal_sender_timeout = \'3s\'')


def test_three_instances_sigkill_the_leader_mid_dump_repeatedly(
    pg_dsn: str, zk_hosts: str, tmp_path: Path
) -> None:
    create_schema(pg_dsn, rows=ROWS)
    cluster = Cluster(tmp_path, pg_dsn, zk_hosts, TABLES)
    leaders: list[str] = []
    kills_mid_dump = 0
    requested = None
    try:
        with Writers(pg_dsn, rows=ROWS, count=2) as writers:
            for _ in range(3):
                cluster.start()
            leader = cluster.wait_leader()
            for round_ in range(3):
                leaders.append(leader)
                before = (cluster.dump() or (0, ""))[0]

                def progressed(b: int = before) -> bool:
                    return (cluster.dump() or (0, ""))[0] > b + 3

                wait_until(progressed, 60, f"{leader} to make dump progress")
                if round_ == 1:  # through the CLI, while a leader runs: stored in ZooKeeper
                    requested = cluster.cli("dump", "--table", "public.t_int")["dump_id"]
                progress = cluster.dump()
                cluster.procs[leader].send_signal(signal.SIGKILL)
                cluster.procs[leader].wait(10)
                if progress is not None and progress[1] != "done":
                    kills_mid_dump += 1
                cluster.start()  # keep three candidates
                leader = cluster.wait_leader(other_than=leader, timeout=60)
            leaders.append(leader)
            wait_until(lambda: (cluster.dump() or (0, ""))[1] == "done", 240,
                       "the dump to finish after the takeovers")
            assert requested is not None
            wait_until(lambda: (cluster.dump(requested) or (0, ""))[1] == "done", 120,
                       "the dump requested before a kill to finish")
            writers.stop()
            cluster.wait_caught_up(pg_dsn)
            status = cluster.cli("status")
        assert not writers.errors, writers.errors
    finally:
        cluster.stop()
    assert kills_mid_dump == 3, f"only {kills_mid_dump} kills hit the running dump"
    assert len(set(leaders)) == 4, leaders
    assert status["leader"]["instance"] == leaders[-1]
    # one election per kill at least (more only if a starved leader's session expired)
    assert status["epoch"] >= 4
    assert status["leader"]["epoch"] == status["state_epoch"] == status["epoch"]
    events = check_output(cluster.out, pg_dsn, TABLES)
    twice = keys_read_twice(events)
    assert not twice, f"{len(twice)} keys were dumped twice (restarted, not resumed): {twice[:3]}"
    dump_ids = {e["dump_id"] for e in events if e["op"] == "read"}
    assert requested in dump_ids and len(dump_ids) == 2


def test_a_frozen_leader_resumed_after_takeover_emits_nothing(
    pg_dsn: str, zk_hosts: str, tmp_path: Path
) -> None:
    create_schema(pg_dsn, rows=ROWS)
    _short_walsender_timeout(pg_dsn)
    cluster = Cluster(tmp_path, pg_dsn, zk_hosts, TABLES)
    try:
        with Writers(pg_dsn, rows=ROWS, count=2) as writers:
            cluster.start()
            zombie = cluster.wait_leader()
            cluster.start()
            wait_until(lambda: (cluster.dump() or (0, ""))[0] > 5, 60, "dump progress")
            cluster.procs[zombie].send_signal(signal.SIGSTOP)
            frozen_at = time.monotonic()
            successor = cluster.wait_leader(other_than=zombie, timeout=30)
            before = (cluster.dump() or (0, ""))[0]
            wait_until(lambda: (cluster.dump() or (0, ""))[0] > before + 3, 60,
                       f"{successor} to make dump progress")
            size_before, state_before = cluster.out.stat().st_size, cluster.store.load()
            cluster.procs[zombie].send_signal(signal.SIGCONT)
            thawed_after = time.monotonic() - frozen_at
            wait_until(lambda: "leadership" in (tmp_path / f"{zombie}.log").read_text(), 20,
                       "the zombie to notice")
            time.sleep(2)
            assert cluster.procs[zombie].poll() is None, "the zombie goes back to candidate"
            assert cluster.leader() == successor
            wait_until(lambda: (cluster.dump() or (0, ""))[1] == "done", 240, "dump to finish")
            writers.stop()
            cluster.wait_caught_up(pg_dsn)
        assert not writers.errors, writers.errors
    finally:
        cluster.stop()
    assert thawed_after > 3.0, "frozen past the session timeout"
    assert state_before is not None and size_before > 0
    zombie_log = (tmp_path / f"{zombie}.log").read_text()
    thaw_log = zombie_log[zombie_log.find("elected leader"):]
    assert "ZooKeeper session lost" in thaw_log or "leadership lost" in thaw_log, thaw_log[-3000:]
    # every line of the shared file is the successor's: seq gapless and increasing, the
    # replay equals the source; a single line appended by the zombie would break both
    events = check_output(cluster.out, pg_dsn, TABLES)
    assert not keys_read_twice(events)
    assert cluster_epoch_of(tmp_path, zombie) < cluster_epoch_of(tmp_path, successor)


def _state_once_reachable(cluster: Cluster, timeout: float = 30.0) -> PipelineState:
    """The committed state, read as soon as the test's own ZooKeeper client can read it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            state = cluster.state()
        except Exception:  # the test's client may still be reconnecting
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
            continue
        assert state is not None
        return state


def cluster_epoch_of(tmp: Path, name: str) -> int:
    """The first epoch ``name`` was elected with, from its log."""
    text = (tmp / f"{name}.log").read_text()
    marker = "with epoch "
    at = text.find(marker)
    assert at >= 0, text[-2000:]
    return int(text[at + len(marker):].split()[0])


def test_zookeeper_outage_and_restart_pause_capture_and_lose_nothing(
    pg_dsn: str, own_zk: ZooKeeperServer, tmp_path: Path
) -> None:
    create_schema(pg_dsn, rows=ROWS)
    cluster = Cluster(tmp_path, pg_dsn, own_zk.hosts, TABLES, session_s=6.0)
    try:
        with Writers(pg_dsn, rows=ROWS, count=2) as writers:
            cluster.start()
            leader = cluster.wait_leader()
            cluster.start()
            wait_until(lambda: (cluster.dump() or (0, ""))[0] > 5, 60, "dump progress")
            for down_s in (2.0, 0.0):  # an outage shorter than the session, then a restart
                own_zk.stop_server()
                time.sleep(down_s)
                own_zk.start_server()
                # progress is measured from a state read once the server is back: commits made
                # just before the outage must not pass for capture after it
                back = _state_once_reachable(cluster)

                def continued(b: PipelineState = back) -> bool:
                    return (cluster.state() or b).seq > b.seq + 100

                wait_until(continued, 60, "capture to continue after the outage")
                assert cluster.leader() == leader, "a short outage keeps the leader"
            wait_until(lambda: (cluster.dump() or (0, ""))[1] == "done", 240, "dump to finish")
            writers.stop()
            cluster.wait_caught_up(pg_dsn)
        assert not writers.errors, writers.errors
    finally:
        cluster.stop()
    log = (tmp_path / f"{leader}.log").read_text()
    assert log.count("connection suspended") >= 2, log[-3000:]
    assert log.count("elected leader") == 1, "the same term went on"
    events = check_output(cluster.out, pg_dsn, TABLES)
    assert not keys_read_twice(events)
