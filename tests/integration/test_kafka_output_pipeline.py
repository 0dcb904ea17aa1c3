"""The central correctness suite and the SIGKILL crash suite with a Kafka output, in both
delivery modes, on every source: what a read_committed consumer reads from Kafka rebuilds every
table equal to the source (I3 checked on Kafka, not on a file).

* exactly-once: no record appears twice, even across kills, and the events in seq order are
  the stream (I1 commit order, I2 no time travel, replay equals the source);
* at-least-once: records may repeat after a kill; a repeat carries the same position and the
  same document as its first copy, so replaying it changes nothing.
"""

from __future__ import annotations

import json
import logging
import signal
import time
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from dblog.app.pipeline import Pipeline
from dblog.engine import EngineSettings
from dblog.harness.kafka import KafkaCluster
from dblog.harness.postgres import HarnessError
from dblog.outputs.kafka import KafkaOutput
from tests.conftest import unavailable

from .pgutil import check_commit_order, check_no_time_travel, dump_state, replayed, wait_until
from .sources import Kit, kit
from .test_crash import _dump_progress, _start
from .test_kafka_output_support import (
    Msg,
    read_all,
    rebuild,
    repeated,
    stream_view,
    topics_with_prefix,
)

pytestmark = pytest.mark.integration
__all__ = ["kit"]
MODES = ["at-least-once", "exactly-once"]
LOG_OPS = {"insert", "update", "delete", "truncate", "begin", "commit"}


def kafka_config(bootstrap: str, prefix: str, delivery: str) -> dict[str, Any]:
    config: dict[str, Any] = {"type": "kafka", "bootstrap_servers": bootstrap,
                              "prefix": prefix, "delivery": delivery,
                              "transaction_topic": "{prefix}.transactions",
                              "flush_timeout_s": 10}
    if delivery == "exactly-once":
        config["transactional_id"] = f"txn-{prefix}"
    return config


def check_kafka(kit: Kit, bootstrap: str, prefix: str, delivery: str) -> list[dict[str, Any]]:
    """What Kafka holds rebuilds the source; the mode's duplicate rule holds. Returns the
    stream view (one document per seq, in seq order)."""
    messages = read_all(bootstrap, topics_with_prefix(bootstrap, prefix))
    tables = {tuple(t.split(".", 1)) for t in kit.tables}
    rows = [m for m in messages if not m.topic.endswith(".transactions")]
    rebuilt = {k: v for k, v in rebuild(rows).items() if k[0] in tables}
    assert rebuilt == kit.source_rows(kit.tables)
    if delivery == "exactly-once":
        assert not repeated(messages), f"records repeated: {repeated(messages)[:5]}"
        events = stream_view(messages)
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), "seq gaps"
        check_commit_order(events, kit.parse_position)
        check_no_time_travel(events)
        assert replayed(events) == kit.source_rows(kit.tables)
        return events
    seqs = {m.seq for m in messages}
    assert seqs == set(range(1, max(seqs) + 1)), "a seq is missing from Kafka"
    check_repeats(rows)
    return []


def check_repeats(messages: list[Msg]) -> int:
    """At-least-once: copies of one log event (same table, key, operation, position and row
    version) carry the same document apart from ``seq`` (a chunk re-read after a kill can
    shift the seqs of the events after it). Returns how many copies beyond the first."""
    copies: dict[tuple[Any, ...], set[str]] = {}
    count = 0
    for m in messages:
        if m.headers["dblog.op"].decode() not in LOG_OPS or "dblog.pos" not in m.headers:
            continue
        doc = None if m.value is None else {k: v for k, v in m.doc().items() if k != "seq"}
        row = None if doc is None else (doc.get("after") or doc.get("before") or {})
        ident = (m.topic, m.key, m.headers["dblog.op"], m.headers["dblog.pos"],
                 m.value is None, None if row is None else row.get("ver"))
        text = json.dumps(doc, sort_keys=True)
        if ident in copies:
            count += 1
        copies.setdefault(ident, set()).add(text)
    differing = {k: v for k, v in copies.items() if len(v) > 1}
    assert not differing, f"copies of one event differ: {list(differing.items())[:2]}"
    return count


@pytest.mark.parametrize("delivery", MODES)
def test_concurrent_writers_rebuild_from_kafka(kit: Kit, kafka_bootstrap: str,
                                               tmp_path: Path, delivery: str) -> None:
    kit.create_schema(rows=2000)
    prefix = f"c{uuid.uuid4().hex[:10]}"
    output = KafkaOutput(kafka_config(kafka_bootstrap, prefix, delivery))
    settings = EngineSettings(chunk_size=50, flush_interval_s=0.2, heartbeat_interval_s=1)
    pipeline = Pipeline(kit.connector("central", "i1"), [output],
                        state_path=str(tmp_path / "state.json"), settings=settings).start()
    try:
        with kit.writers(rows=2000, count=3) as writers:
            dump_id = pipeline.dump(kit.tables)
            wait_until(lambda: dump_state(pipeline, dump_id) == "done", 240, "the dump")
            wait_until(lambda: writers.committed > 100, 60, "100 writer transactions")
        assert not writers.errors, writers.errors
        _catch_up(pipeline, kit)
    finally:
        pipeline.stop()
    events = check_kafka(kit, kafka_bootstrap, prefix, delivery)
    if events:
        reads = sum(1 for e in events if e["op"] == "read")
        assert reads > 1000, f"only {reads} read events: the dump did not run"


def _catch_up(pipeline: Pipeline, kit: Kit) -> None:
    target = kit.current_position()

    def caught_up() -> bool:
        position = pipeline.status()["committed_position"]
        return position is not None and kit.parse_position(position) >= target

    wait_until(caught_up, 120, f"the committed position to reach {target}")


CONFIG = """
name: crash
source: {source}
outputs:
  - {output}
state:
  path: "{state}"
engine:
  chunk_size: 50
  chunk_delay_s: 0.04
  flush_interval_s: 0.1
  heartbeat_interval_s: 1
initial_dumps:
  - tables: {tables}
"""


def _advanced(state: Path, chunks_before: int) -> bool:
    chunks, dump_state = _dump_progress(state) or (0, "")
    return chunks > chunks_before or dump_state == "done"


@pytest.mark.parametrize("delivery", MODES)
def test_sigkill_during_dump_with_kafka(kit: Kit, kafka_bootstrap: str, tmp_path: Path,
                                        delivery: str) -> None:
    import random

    kit.create_schema(rows=6000)
    prefix = f"x{uuid.uuid4().hex[:10]}"
    state = tmp_path / "state.json"
    config = tmp_path / "dblog.yaml"
    config.write_text(CONFIG.format(
        source=json.dumps(kit.source_config("crash")), state=state,
        output=json.dumps(kafka_config(kafka_bootstrap, prefix, delivery)),
        tables=json.dumps(kit.tables)))
    log = tmp_path / "dblog.log"
    rng = random.Random(11)
    kills_mid_dump = 0
    with kit.writers(rows=6000, count=2) as writers:
        for _ in range(5):
            before = (_dump_progress(state) or (0, ""))[0]
            proc = _start(config, log)
            # a start takes 2-4 s here, and on loaded cores a child may spend many more
            # catching up with the writers' backlog before its first chunk: kill once this
            # child committed a chunk (or the dump ended), after a random extra moment
            wait_until(partial(_advanced, state, before), 300, "a chunk committed by this child")
            time.sleep(rng.uniform(0.0, 2.0))
            progress = _dump_progress(state)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            if progress is not None and progress[1] != "done" and progress[0] > 0:
                kills_mid_dump += 1
        proc = _start(config, log)
        try:
            wait_until(lambda: (_dump_progress(state) or (0, ""))[1] == "done", 400,
                       "the dump to finish after the restarts")
            writers.stop()
            _wait_state_position(kit, state)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    assert not writers.errors, writers.errors
    assert kills_mid_dump >= 2, f"only {kills_mid_dump} kills hit a running dump: " \
                                f"{log.read_text()[-3000:]}"
    events = check_kafka(kit, kafka_bootstrap, prefix, delivery)
    if events:  # resumed, not restarted: no key was dumped twice
        reads = [(e["table"], tuple(e["key"])) for e in events if e["op"] == "read"]
        assert len(reads) == len(set(reads)), "keys dumped twice"


def _wait_state_position(kit: Kit, state: Path) -> None:
    from dblog.state import FileStateStore, state_from_json

    target = kit.current_position()

    def caught_up() -> bool:
        stored = FileStateStore(state).load()
        position = state_from_json(stored.data).position if stored else None
        return isinstance(position, type(target)) and position >= target

    wait_until(caught_up, 180, "the capture to catch up")


@pytest.fixture()
def own_kafka(tmp_path: Path) -> Iterator[KafkaCluster]:
    """A broker of the test's own: it is stopped and restarted."""
    from dblog.harness.kafka import start_kafka

    try:
        cluster = start_kafka()
    except (HarnessError, OSError) as exc:
        unavailable("Kafka", str(exc))
    try:
        yield cluster
    finally:
        (tmp_path / "kafka.log").write_text(cluster.log_tail(10**6))
        cluster.stop()


@pytest.mark.parametrize("delivery", MODES)
def test_a_broker_outage_pauses_capture_and_loses_nothing(
        pg_dsn: str, own_kafka: KafkaCluster, tmp_path: Path, delivery: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """The broker is killed for 20 s mid-stream and started again: capture stops emitting
    (the output's queue is full while its flush waits and retries, visibly in the log),
    nothing is committed meanwhile, and afterwards Kafka holds every change."""
    caplog.set_level(logging.INFO)
    kit = Kit("postgres", pg_dsn)
    kit.create_schema(rows=1000)
    prefix = f"o{uuid.uuid4().hex[:10]}"
    config = {**kafka_config(own_kafka.bootstrap, prefix, delivery), "flush_timeout_s": 3}
    config.pop("type")
    settings = EngineSettings(chunk_size=100, flush_interval_s=0.2, heartbeat_interval_s=1)
    pipeline = Pipeline(kit.connector("outage", "outage"), [KafkaOutput(config)],
                        state_path=str(tmp_path / "state.json"), settings=settings).start()
    try:
        with kit.writers(rows=1000, count=2) as writers:
            pipeline.dump(kit.tables)
            wait_until(lambda: pipeline.status()["committed_seq"] > 2000, 120, "progress")
            own_kafka.stop_node(0)
            time.sleep(6)
            paused = pipeline.status()
            time.sleep(14)
            still = pipeline.status()
            own_kafka.start_node(0)
            wait_until(lambda: pipeline.status()["committed_seq"] > still["emitted_seq"], 180,
                       "capture to go on after the broker restarted")
            time.sleep(2)
        assert not writers.errors, writers.errors
        _catch_up(pipeline, kit)
    finally:
        pipeline.stop()
    assert still["committed_seq"] == paused["committed_seq"], "committed while Kafka was down"
    assert still["emitted_seq"] - paused["emitted_seq"] <= settings.batch_size, \
        f"capture went on while Kafka was down: {paused['emitted_seq']} -> {still['emitted_seq']}"
    retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert any("flush" in r and "not delivered" in r for r in retries) or \
        any("flush" in r and "Kafka" in r for r in retries), retries[:5]
    check_kafka(kit, own_kafka.bootstrap, prefix, delivery)


def test_an_oversized_row_stops_the_pipeline_naming_it_and_loses_nothing(
        pg_dsn: str, kafka_bootstrap: str, tmp_path: Path) -> None:
    """A row over the size limits stops the pipeline with its table and key named; the state
    stays before it; with the limits raised, a restart delivers it and what followed."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    from dblog.errors import FatalOutputError

    kit = Kit("postgres", pg_dsn)
    kit.execute("CREATE TABLE big (id int PRIMARY KEY, v text)")
    prefix = f"b{uuid.uuid4().hex[:10]}"
    settings = EngineSettings(flush_interval_s=0.2, heartbeat_interval_s=1)

    def pipeline(**extra: Any) -> Pipeline:
        config = {**kafka_config(kafka_bootstrap, prefix, "at-least-once"), **extra}
        config.pop("type")
        return Pipeline(kit.connector("big", "big"), [KafkaOutput(config)],
                        state_path=str(tmp_path / "state.json"), settings=settings)

    first = pipeline().start()
    kit.execute("INSERT INTO big VALUES (1, 'a'), (2, 'b')")
    wait_until(lambda: first.status()["committed_seq"] >= 4, 60, "the first rows")
    kit.execute("INSERT INTO big VALUES (3, repeat('x', 2000000))")
    kit.execute("INSERT INTO big VALUES (4, 'after')")
    with pytest.raises(FatalOutputError) as raised:
        first.join(120)
    text = str(raised.value)
    assert "public.big key [3]" in text and "size limit" in text, text
    assert "message.max.bytes" in text  # (the pipeline has stopped)
    topic = f"{prefix}.public.big"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    entry = ConfigEntry("max.message.bytes", "8388608",
                        incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("topic", topic, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(30)
    second = pipeline(producer={"message.max.bytes": 8_000_000}).start()
    try:
        _catch_up(second, kit)
    finally:
        second.stop()
    rows = rebuild(read_all(kafka_bootstrap, [topic]))
    assert rows == kit.source_rows(["public.big"])
    assert len(rows) == 4
