"""``dblog status`` and ``dblog dump`` against ZooKeeper (no pipeline needed)."""

from __future__ import annotations

import datetime
from typing import Any

from kazoo.client import KazooClient

from dblog.app.config import PipelineConfig
from dblog.ha import requests
from dblog.ha.election import read_leader
from dblog.ha.zk import ZkPaths, ZooKeeperStateStore, classified, connect
from dblog.state import state_from_json


def _client(config: PipelineConfig) -> tuple[KazooClient, ZkPaths]:
    state = config.state
    assert state.hosts is not None  # validated by StateConfig
    client = connect(state.hosts, state.session_timeout_s, state.connect_timeout_s)
    return client, ZkPaths.of(state.root, config.name)


def _iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).isoformat()


def ha_status(config: PipelineConfig) -> dict[str, Any]:
    """Who leads, since when, the epoch, and the committed state."""
    client, paths = _client(config)
    try:
        store = ZooKeeperStateStore(client, paths)
        leader = read_leader(client, paths)
        with classified("reading the epoch"):
            _, epoch_stat = client.get(paths.epoch)
        stored = store.load()
        state = None if stored is None else state_from_json(stored.data)
        return {
            "leader": None if leader is None else {
                "instance": leader["instance"], "since": _iso(leader["since"]),
                "epoch": leader["epoch"]},
            "epoch": int(epoch_stat.version),
            "state_epoch": store.stored_epoch(),
            "version": None if stored is None else stored.version,
            "committed_position": None if state is None or state.position is None
            else str(state.position),
            "committed_seq": None if state is None else state.seq,
            "dumps": [] if state is None else [
                {"id": d.id, "state": d.state.value, "rows": d.rows, "chunks": d.chunks,
                 "error": d.error} for d in state.dumps.dumps if not d.internal],
            "queued_requests": [r["id"] for _, r in requests.pending(client, paths)],
            "rejected_requests": requests.rejected(client, paths),
        }
    finally:
        client.stop()
        client.close()


def queue_dump(config: PipelineConfig, tables: list[str] | None) -> str:
    client, paths = _client(config)
    try:
        return requests.queue_dump(client, paths, tables)
    finally:
        client.stop()
        client.close()
