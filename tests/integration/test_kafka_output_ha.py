"""A zombie leader against the real broker, exactly-once: the leader is frozen (SIGSTOP) past
its ZooKeeper session, a standby takes over (its ``init_transactions`` fences the old producer
and aborts the open transaction), the old leader is resumed: none of its records becomes
visible to read_committed consumers, and Kafka still rebuilds the source."""

from __future__ import annotations

import json
import re
import signal
import time
import uuid
from pathlib import Path

import pytest

from .hautil import Cluster
from .pgutil import wait_until
from .sources import Kit
from .test_ha_failover import _short_walsender_timeout, cluster_epoch_of
from .test_kafka_output_pipeline import check_kafka, kafka_config
from .test_kafka_output_support import read_all, topics_with_prefix
from .workload import TABLES, Writers, create_schema

pytestmark = pytest.mark.integration
ROWS = 4000


def _kafka_cluster(tmp: Path, dsn: str, zk_hosts: str, bootstrap: str, prefix: str) -> Cluster:
    """The HA harness's cluster with its jsonl output swapped for an exactly-once Kafka one."""
    cluster = Cluster(tmp, dsn, zk_hosts, TABLES)
    text = cluster.config.read_text()
    jsonl = f'  - type: jsonl\n    path: "{cluster.out}"\n'
    assert jsonl in text
    output = json.dumps(kafka_config(bootstrap, prefix, "exactly-once"))
    cluster.config.write_text(text.replace(jsonl, f"  - {output}\n"))
    return cluster


def _kafka_seq_at_takeover(log: str) -> int:
    """What Kafka held when the successor opened its output: the checkpoint it read (every
    event up to that seq was committed before the takeover), else the seq it resumed from."""
    found = re.search(r"events up to seq (\d+) committed", log) or \
        re.search(r"resumed at position \S+, seq (\d+)", log)
    assert found, log[-2000:]
    return int(found.group(1))


def test_a_frozen_leader_resumed_after_takeover_commits_nothing_to_kafka(
        pg_dsn: str, zk_hosts: str, kafka_bootstrap: str, tmp_path: Path) -> None:
    create_schema(pg_dsn, rows=ROWS)
    _short_walsender_timeout(pg_dsn)
    prefix = f"z{uuid.uuid4().hex[:10]}"
    cluster = _kafka_cluster(tmp_path, pg_dsn, zk_hosts, kafka_bootstrap, prefix)
    try:
        with Writers(pg_dsn, rows=ROWS, count=2) as writers:
            cluster.start()
            zombie = cluster.wait_leader()
            cluster.start()
            wait_until(lambda: (cluster.dump() or (0, ""))[0] > 5, 90, "dump progress")
            cluster.procs[zombie].send_signal(signal.SIGSTOP)
            frozen_at = time.monotonic()
            successor = cluster.wait_leader(other_than=zombie, timeout=30)
            before = (cluster.dump() or (0, ""))[0]
            wait_until(lambda: (cluster.dump() or (0, ""))[0] > before + 3, 90,
                       f"{successor} to make dump progress")
            cluster.procs[zombie].send_signal(signal.SIGCONT)
            thawed_after = time.monotonic() - frozen_at
            zombie_log = tmp_path / f"{zombie}.log"
            wait_until(lambda: "leadership" in zombie_log.read_text()
                       or "fenced" in zombie_log.read_text(), 30, "the zombie to notice")
            time.sleep(2)
            assert cluster.leader() == successor
            wait_until(lambda: (cluster.dump() or (0, ""))[1] == "done", 300, "dump to finish")
            writers.stop()
            cluster.wait_caught_up(pg_dsn)
        assert not writers.errors, writers.errors
    finally:
        cluster.stop()
    assert thawed_after > 3.0, "frozen past the session timeout"
    kit = Kit("postgres", pg_dsn)
    check_kafka(kit, kafka_bootstrap, prefix, "exactly-once")  # no repeats, rebuilds
    old, new = cluster_epoch_of(tmp_path, zombie), cluster_epoch_of(tmp_path, successor)
    assert old < new
    takeover = _kafka_seq_at_takeover((tmp_path / f"{successor}.log").read_text())
    visible = read_all(kafka_bootstrap, topics_with_prefix(kafka_bootstrap, prefix))
    late = [m for m in visible if m.headers["dblog.epoch"] == str(old).encode()
            and m.seq > takeover]
    assert not late, f"the zombie's records past seq {takeover} are visible: {late[:3]}"
    assert any(m.headers["dblog.epoch"] == str(new).encode() for m in visible)
    text = (tmp_path / f"{zombie}.log").read_text()
    thaw = text[text.find("elected leader"):]
    assert "leadership lost" in thaw or "fenced" in thaw or "ZooKeeper session lost" in thaw, \
        thaw[-3000:]
