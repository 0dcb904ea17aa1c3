"""Issue 16: every damage of the ZooKeeper state znode gives one StateError naming the znode
and the fix (loading, reading its epoch, saving, a pipeline run and ``dblog status``), never a
raw KeyError, TypeError or ValueError; a damaged znode is never overwritten. The same damages
as the file store's (tests/unit/test_robust_state.py), in the znode's envelope (its version is
the znode's own)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dblog.errors import StateError
from dblog.ha.zk import ZkPaths, ZooKeeperStateStore, connect
from dblog.testing import ListOutput, MemoryDatabase
from tests.unit.engine_script import Run, fast_settings
from tests.unit.test_robust_state import GOOD_DUMP

pytestmark = pytest.mark.integration


def _doc(data: object, **envelope: object) -> bytes:
    return json.dumps({"epoch": 0, **envelope, "data": data}).encode()


DAMAGED: dict[str, bytes] = {
    "empty": b"",
    "not-json": b"{\"epoch\": 3, ",
    "binary": b"\x00\xff\xfe garbage",
    "object-without-fields": b"{}",
    "list": b"[]",
    "string": b'"x"',
    "number": b"42",
    "no-data": json.dumps({"epoch": 0}).encode(),
    "data-list": _doc([]),
    "epoch-string": _doc({}, epoch="x"),
    "epoch-null": _doc({}, epoch=None),
    "bad-position": _doc({"position": "lsn:zz", "seq": 1}),
    "unknown-position-kind": _doc({"position": "nope:1", "seq": 1}),
    "seq-string": _doc({"seq": "abc"}),
    "dumps-dict": _doc({"dumps": {}}),
    "dump-empty": _doc({"dumps": [{}]}),
    "dump-bad-state": _doc({"dumps": [{**GOOD_DUMP, "state": "exploded"}]}),
}


@pytest.fixture()
def zk(zk_hosts: str) -> Iterator[tuple[Any, ZkPaths]]:
    client = connect(zk_hosts, session_timeout_s=10)
    paths = ZkPaths.of("/robust-state", uuid.uuid4().hex)
    try:
        yield client, paths
    finally:
        client.delete(paths.base, recursive=True)
        client.stop()
        client.close()


def _assert_names_znode_and_fix(error: StateError, paths: ZkPaths) -> None:
    assert paths.state in error.message, error.message
    assert error.fix, error


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_a_damaged_state_znode_gives_one_state_error(zk: tuple[Any, ZkPaths], name: str
                                                     ) -> None:
    client, paths = zk
    store = ZooKeeperStateStore(client, paths, fenced=True)
    client.create(paths.state, DAMAGED[name])
    for call in (store.load, store.stored_epoch, lambda: store.save({"seq": 1}, 0, 0)):
        with pytest.raises(StateError) as raised:
            call()
        _assert_names_znode_and_fix(raised.value, paths)
    db = MemoryDatabase()
    db.create_table("public.t", ["id"], ["id"])
    with pytest.raises(StateError) as running:
        Run(db, [ListOutput()], store, settings=fast_settings()).go()
    _assert_names_znode_and_fix(running.value, paths)
    assert client.get(paths.state)[0] == DAMAGED[name]  # never overwritten


def test_a_good_state_znode_still_loads(zk: tuple[Any, ZkPaths]) -> None:
    client, paths = zk
    store = ZooKeeperStateStore(client, paths)
    client.create(paths.state, _doc({"position": None, "seq": 7, "dumps": [GOOD_DUMP]}, epoch=2))
    stored = store.load()
    assert stored is not None and stored.version == 0 and stored.data["seq"] == 7
    assert store.stored_epoch() == 2


@pytest.mark.parametrize("name", ["object-without-fields", "epoch-string", "dump-empty"])
def test_dblog_status_shows_a_damaged_state_znode_with_the_fix(
        zk: tuple[Any, ZkPaths], zk_hosts: str, tmp_path: Path, name: str) -> None:
    client, paths = zk
    ZooKeeperStateStore(client, paths)
    client.create(paths.state, DAMAGED[name])
    root, _, pipeline = paths.base.rpartition("/")
    config = tmp_path / "dblog.yaml"
    config.write_text(f"name: {pipeline}\n"
                      "source: {type: postgres, dsn: 'host=127.0.0.1 port=9'}\n"
                      f"outputs: [{{type: jsonl, path: '{tmp_path / 'out.jsonl'}'}}]\n"
                      f"state: {{type: zookeeper, hosts: '{zk_hosts}', root: '{root}'}}\n"
                      "api: {enabled: false}\n")
    done = subprocess.run([sys.executable, "-m", "dblog", "status", "--config", str(config)],
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    shown = json.loads(done.stdout)  # what status shows when no instance runs
    assert shown["running"] is False
    assert shown["state_store"].startswith(f"error: state znode {paths.state}"), shown
    assert "delete" in shown["fix"], shown
