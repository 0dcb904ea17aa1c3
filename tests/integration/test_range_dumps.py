"""Key-range dumps on every source (PostgreSQL, MariaDB), under concurrent writers: the dump
reads exactly the keys from its first to its last key, both included (the source compares,
row values for the composite key), and once the stream caught up, the replayed rows of the
range equal the source's."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from dblog.app.pipeline import Pipeline
from dblog.core.model import Op, TableId
from dblog.engine import EngineSettings
from dblog.errors import DumpRequestError
from dblog.outputs.jsonl import JsonlOutput

from .pgutil import dump_state, read_events, replayed, wait_until
from .sources import Kit, kit
from .test_central import _catch_up

pytestmark = pytest.mark.integration
__all__ = ["kit"]


def _in(key: tuple[Any, ...], low: tuple[Any, ...], high: tuple[Any, ...]) -> bool:
    return low <= key <= high  # canonical keys of these tables order as in the sources


def test_range_dumps_read_the_range_under_writes(kit: Kit, tmp_path: Path) -> None:
    kit.create_schema(rows=2000)
    settings = EngineSettings(chunk_size=37, flush_interval_s=0.2, heartbeat_interval_s=1)
    pipeline = Pipeline(kit.connector("ranges", "r1"),
                        [JsonlOutput({"path": str(tmp_path / "out.jsonl")})],
                        state_path=str(tmp_path / "state.json"), settings=settings).start()
    t_int, t_comp = kit.table("t_int"), kit.table("t_comp")
    ranges = {t_int: ((500,), (1500,)), t_comp: ((10, "x3"), (12, "x5"))}
    try:
        with kit.writers(rows=2000, count=2) as writers:
            ids = {table: pipeline.request_range_dump(table, list(low), list(high))
                   for table, (low, high) in ranges.items()}
            wait_until(lambda: all(dump_state(pipeline, d) == "done" for d in ids.values()),
                       240, "the dumps")
            wait_until(lambda: writers.committed > 50, 60, "50 writer transactions")
        assert not writers.errors, writers.errors
        _catch_up(pipeline, kit)
    finally:
        pipeline.stop()
    events = read_events(tmp_path / "out.jsonl")
    source = kit.source_rows([t_int, t_comp])
    got = replayed(events)
    for table, (low, high) in _canonical(kit, ranges).items():
        name = tuple(table.split("."))
        dumped = [tuple(e["key"]) for e in events if e.get("dump_id") == ids[table]]
        assert dumped and all(_in(k, low, high) for k in dumped), (table, dumped[:5])
        want = {k: r for k, r in source.items() if k[0] == name and _in(k[1], low, high)}
        assert {k: r for k, r in got.items() if k[0] == name and _in(k[1], low, high)} == want
        status = pipeline.dump_status(ids[table])
        assert status is not None and status["range"] == {"from": list(low), "to": list(high)}


Range = tuple[tuple[Any, ...], tuple[Any, ...]]


def _canonical(kit: Kit, ranges: dict[str, Range]) -> dict[str, Range]:
    """The ranges' ends in the source's canonical key form (MariaDB's case-insensitive
    collation gives ``'X3'`` for ``'x3'``), as the dump's events and its state carry them."""
    reader = kit.chunk_reader()
    try:
        out = {}
        for table, (low, high) in ranges.items():
            info = reader.table_info(TableId.parse(table))
            out[table] = (tuple(reader.parse_key(info, list(low))),
                          tuple(reader.parse_key(info, list(high))))
        return out
    finally:
        reader.close()


def test_a_range_request_queued_in_zookeeper_is_served_as_a_range_dump(zk_hosts: str) -> None:
    """The standby's path: the request goes through the ZooKeeper queue (a range of the wrong
    shape is refused before it is queued) and the leader's engine runs it as a range dump."""
    from concurrent.futures import Future

    from dblog.ha import requests
    from dblog.ha.zk import ZkPaths, ZooKeeperStateStore, connect
    from dblog.testing import ListOutput, MemoryConnector, MemoryDatabase, MemoryStateStore

    db = MemoryDatabase()
    table = db.create_table("public.t", ["id", "v"], ["id"])
    db.tables[table].rows.update({(k,): {"id": k, "v": k} for k in range(40)})
    out = ListOutput()
    pipeline = Pipeline(MemoryConnector(db), [out], state=MemoryStateStore(),
                        settings=EngineSettings(chunk_size=3, poll_timeout_s=0.01)).start()
    client = connect(zk_hosts, 10.0)
    paths = ZkPaths.of(f"/range-{uuid.uuid4().hex[:8]}", "p")
    ZooKeeperStateStore(client, paths)  # creates the layout
    try:
        with pytest.raises(DumpRequestError, match="1 and 2 value"):
            requests.queue_range_dump(client, paths, "public.t", [1], [2, 3])
        dump_id = requests.queue_range_dump(client, paths, "public.t", [7], [19])
        assert requests.pending(client, paths)[0][1]["range"] == {"from": [7], "to": [19]}

        def submit(request: dict[str, Any]) -> Future[str]:
            return pipeline.submit_dump(requests.dump_request(request))

        assert requests.consume(client, paths, submit, timeout=10) == 1
        wait_until(lambda: dump_state(pipeline, dump_id) == "done", 30, "the range dump")
    finally:
        pipeline.stop()
        client.stop()
        client.close()
    read = sorted(e.key[0] for e in out.events if e.op is Op.READ)  # type: ignore[index]
    assert read == list(range(7, 20))
