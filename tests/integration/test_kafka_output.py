"""The Kafka output against a real broker (the harness's KRaft node): records, keys, headers,
tombstones and partitions; delivery reports; exactly-once transactions, checkpoints and
fencing; an unreachable broker; oversized records. The pipeline-level suites (central,
crash, broker outage, zombie leader) are in test_kafka_output_pipeline.py and
test_kafka_output_ha.py."""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson
import pytest

from dblog.connectors.postgres.positions import Lsn
from dblog.core.model import ChangeEvent, ColumnInfo, Op, TableId, TableInfo
from dblog.errors import ConfigError, FatalOutputError, LeadershipLost
from dblog.harness.postgres import free_port
from dblog.outputs.kafka import KafkaOutput
from dblog.spi import Checkpoint, CheckpointingOutput, DiscardingOutput, FencedOutput, Output
from tests.contract.test_output_contract import as_json, make_events

from .test_kafka_output_support import (
    java_partition,
    murmur2,
    read_all,
    repeated,
    stream_view,
    topics_with_prefix,
)

pytestmark = pytest.mark.integration
T = TableId("public", "orders")


def _output(bootstrap: str, prefix: str, **extra: Any) -> KafkaOutput:
    config = {"bootstrap_servers": bootstrap, "prefix": prefix,
              "transaction_topic": "{prefix}.transactions", **extra}
    if extra.get("delivery") == "exactly-once":
        config.setdefault("transactional_id", f"txn-{prefix}")
    output = KafkaOutput(config)
    output.bind(prefix, 1)
    return output


def _prefix() -> str:
    return f"k{uuid.uuid4().hex[:10]}"


def test_murmur2_matches_kafkas_java_utils() -> None:
    """Known values from Kafka's UtilsTest.testMurmur2 (the helper the next test trusts)."""
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
             b"abc": 479470107}
    assert {k: murmur2(k) for k in cases} == cases


def test_config_errors_name_the_field_and_the_fix() -> None:
    with pytest.raises(ValueError, match=r"topic .*\['tabel'\].*use"):
        KafkaOutput({"bootstrap_servers": "h:1", "topic": "{prefix}.{tabel}"})
    with pytest.raises(ValueError, match=r"producer\.enable\.idempotence cannot be overridden"):
        KafkaOutput({"bootstrap_servers": "h:1", "producer": {"enable.idempotence": False}})
    with pytest.raises(ValueError, match="'kafka' is not host:port"):
        KafkaOutput({"bootstrap_servers": "kafka"})
    with pytest.raises(ValueError, match=r"checkpoint_topic .*\['table'\]"):
        KafkaOutput({"bootstrap_servers": "h:1", "checkpoint_topic": "{table}.cp"})
    with pytest.raises(ConfigError, match="unknown format 'avro'"):
        KafkaOutput({"bootstrap_servers": "h:1", "format": "avro"})


def test_the_output_has_every_ability() -> None:
    output = KafkaOutput({"bootstrap_servers": "h:1"})
    for protocol in (Output, FencedOutput, DiscardingOutput, CheckpointingOutput):
        assert isinstance(output, protocol), protocol


def test_records_keys_headers_tombstones_and_partitions(kafka_bootstrap: str) -> None:
    prefix = _prefix()
    output = _output(kafka_bootstrap, prefix)
    output.open(0)
    events = make_events(1, 21)
    output.write(events[:10])
    output.write(events[10:])
    assert output.flush() == 21
    output.close()
    messages = read_all(kafka_bootstrap, topics_with_prefix(kafka_bootstrap, prefix))
    assert not repeated(messages)
    assert stream_view(messages) == [as_json(e) for e in events]
    by_seq: dict[int, list[Any]] = {}
    for m in messages:
        by_seq.setdefault(m.seq, []).append(m)
        assert m.headers["dblog.epoch"] == b"1"
        assert m.headers["dblog.pos"] == str(events[m.seq - 1].position).encode()
        if m.key is not None:  # Java's partitioner: murmur2 of the key bytes
            assert m.partition == java_partition(m.key, 3), m
    table_topic = f"{prefix}.public.orders"
    for event in events:
        got: dict[bytes | None, list[Any]] = {}  # per key (one partition), in offset order
        for m in sorted(by_seq[event.seq], key=lambda m: (m.partition, m.offset)):
            got.setdefault(m.key, []).append(
                (m.topic, None if m.value is None else m.doc()["op"]))
        key = None if event.key is None else orjson.dumps(event.key)
        if event.op is Op.DELETE:
            assert got == {key: [(table_topic, "delete"), (table_topic, None)]}
        elif event.op is Op.UPDATE:  # every update of make_events changes the key
            old = orjson.dumps(event.old_key)
            assert got == {old: [(table_topic, "delete"), (table_topic, None)],
                           key: [(table_topic, "update")]}
        elif event.op is Op.TRUNCATE:  # one copy in every partition
            assert sorted(m.partition for m in by_seq[event.seq]) == [0, 1, 2]
        elif event.op in (Op.BEGIN, Op.COMMIT):
            assert got == {None: [(f"{prefix}.transactions", event.op.value)]}
            assert by_seq[event.seq][0].partition == 0
        else:
            assert got == {key: [(table_topic, event.op.value)]}


def test_flush_right_after_open_acknowledges_the_committed_seq(kafka_bootstrap: str) -> None:
    for delivery in ("at-least-once", "exactly-once"):
        output = _output(kafka_bootstrap, _prefix(), delivery=delivery)
        output.open(7)
        assert output.flush() == 7
        output.write(make_events(8, 9))
        assert output.flush() == 9
        output.close()


def _checkpoint(prefix: str, seq: int, epoch: int = 1) -> Checkpoint:
    return Checkpoint(prefix, epoch, {"seq": seq, "position": f"lsn:{seq}"})


def test_exactly_once_skips_what_kafka_holds_after_a_crash(kafka_bootstrap: str) -> None:
    """A crash after the Kafka commit and before the state save: the reopened output reports
    the committed checkpoint and skips the replayed events it holds, so a read_committed
    consumer sees every event once."""
    prefix = _prefix()
    first = _output(kafka_bootstrap, prefix, delivery="exactly-once")
    first.open(0)
    first.write(make_events(1, 10))
    assert first.flush_checkpoint(_checkpoint(prefix, 8)) == 10
    first.write(make_events(11, 13))  # never committed: the process dies here
    assert first._producer is not None and first._producer.flush(30) == 0  # at the broker
    second = _output(kafka_bootstrap, prefix, delivery="exactly-once")
    second.open(4)  # the state store was saved at seq 4
    assert second.committed_checkpoint() == _checkpoint(prefix, 8)
    second.write(make_events(9, 16, tag="replay"))  # the engine replays from seq 8
    assert second.flush_checkpoint(_checkpoint(prefix, 16)) == 16
    second.close()
    messages = read_all(kafka_bootstrap, topics_with_prefix(kafka_bootstrap, prefix))
    assert not repeated(messages)
    seqs = [d["seq"] for d in stream_view(messages)]
    assert seqs == list(range(1, 17))
    tags = {d["seq"]: d["after"]["tag"] for d in stream_view(messages) if "tag" in
            (d.get("after") or {})}
    assert all(tag.startswith("replay") == (seq > 10) for seq, tag in tags.items()), tags
    uncommitted = read_all(kafka_bootstrap, topics_with_prefix(kafka_bootstrap, prefix),
                           isolation="read_uncommitted")
    assert {m.seq for m in uncommitted} >= {11, 12, 13}  # written, then aborted by init


def test_a_new_producer_fences_the_old_one_and_aborts_its_transaction(
        kafka_bootstrap: str) -> None:
    prefix = _prefix()
    old = _output(kafka_bootstrap, prefix, delivery="exactly-once")
    old.open(0)
    old.write(make_events(1, 5))
    assert old.flush_checkpoint(_checkpoint(prefix, 5)) == 5
    old.write(make_events(6, 9, tag="zombie"))
    assert old._producer is not None and old._producer.flush(30) == 0  # at the broker
    new = _output(kafka_bootstrap, prefix, delivery="exactly-once")
    new.bind(prefix, 2)
    new.open(5)
    with pytest.raises(LeadershipLost, match="fenced"):
        old.flush_checkpoint(_checkpoint(prefix, 9))
    with pytest.raises(LeadershipLost):
        old.write(make_events(10, 10, tag="zombie"))
    new.write(make_events(6, 7, tag="leader"))
    assert new.flush_checkpoint(_checkpoint(prefix, 7, epoch=2)) == 7
    new.close()
    docs = stream_view(read_all(kafka_bootstrap, topics_with_prefix(kafka_bootstrap, prefix)))
    assert [d["seq"] for d in docs] == list(range(1, 8))
    assert not [d for d in docs if "zombie" in str(d.get("after"))]
    older = _output(kafka_bootstrap, prefix, delivery="exactly-once")  # epoch 1 < 2
    with pytest.raises(LeadershipLost, match="epoch 2, newer than this instance's 1"):
        older.open(7)


def test_a_fence_refuses_before_anything_is_produced(kafka_bootstrap: str) -> None:
    prefix = _prefix()
    output = _output(kafka_bootstrap, prefix)
    leading = [True]
    output.set_fence(lambda: leading[0])
    output.open(0)
    output.write(make_events(1, 3))
    leading[0] = False
    with pytest.raises(LeadershipLost, match="3 event"):
        output.write(make_events(4, 6))
    assert output.flush() == 3
    output.discard()
    messages = read_all(kafka_bootstrap, topics_with_prefix(kafka_bootstrap, prefix))
    assert max(m.seq for m in messages) == 3


def test_an_unreachable_broker_at_start_is_one_clear_error() -> None:
    output = KafkaOutput({"bootstrap_servers": f"127.0.0.1:{free_port()}",
                          "connect_timeout_s": 3})
    started = time.monotonic()
    with pytest.raises(FatalOutputError) as raised:
        output.open(0)
    assert time.monotonic() - started < 15
    text = str(raised.value)
    assert "unreachable: no answer to a metadata request within 3 s" in text
    assert output.config.bootstrap_servers in text and "fix: check bootstrap_servers" in text


def _big(seq: int, size: int) -> ChangeEvent:
    event = ChangeEvent(Op.INSERT, T, (seq, "big"), after={"id": seq, "blob": "x" * size},
                        position=Lsn(seq), txid=seq)
    event.seq = seq
    return event


@pytest.mark.parametrize("where", ["producer", "broker"])
def test_an_oversized_record_names_its_table_and_key(kafka_bootstrap: str, where: str) -> None:
    """Over the producer's message.max.bytes, produce refuses it at once; over the broker's
    limit only (the producer allows more), the delivery report does. Either way the error
    names the table and key, and the records before it are delivered."""
    prefix = _prefix()
    extra = {"producer": {"message.max.bytes": 8_000_000}} if where == "broker" else {}
    output = _output(kafka_bootstrap, prefix, **extra)
    output.open(0)
    output.write(make_events(1, 4))
    assert output.flush() == 4
    if where == "producer":
        with pytest.raises(FatalOutputError) as raised:
            output.write([_big(5, 2_000_000)])
    else:
        output.write([_big(5, 2_000_000)])
        with pytest.raises(FatalOutputError) as raised:
            output.flush()
    text = str(raised.value)
    assert "public.orders" in text and '[5,"big"]' in text and "size" in text.lower(), text
    assert "message.max.bytes" in text
    output.discard()
    seqs = {m.seq for m in read_all(kafka_bootstrap, topics_with_prefix(kafka_bootstrap,
                                                                          prefix))}
    assert seqs == {1, 2, 3, 4}


def test_debezium_json_records_through_kafka(kafka_bootstrap: str) -> None:
    """A changelog format plans its own records (delete + tombstone, a key change as delete,
    tombstone and create); the transport keys, partitions and heads them the same way."""
    info = TableInfo(T, (ColumnInfo("id", "integer"), ColumnInfo("tag", "text")), ("id",))
    prefix = _prefix()
    output = _output(kafka_bootstrap, prefix, format="debezium-json")
    output.set_tables(lambda table: info if table == T else None)
    output.open(0)
    events = [ChangeEvent(Op.INSERT, T, (1,), after={"id": 1, "tag": "a"}),
              ChangeEvent(Op.UPDATE, T, (2,), before={"id": 1, "tag": "a"},
                          after={"id": 2, "tag": "b"}, old_key=(1,)),
              ChangeEvent(Op.DELETE, T, (2,), before={"id": 2, "tag": "b"}),
              ChangeEvent(Op.TRUNCATE, T)]
    for seq, event in enumerate(events, 1):
        event.seq, event.position, event.txid = seq, Lsn(seq << 8), 700 + seq
        event.commit_ts = "2024-05-01 12:00:00.428784+00"
    output.write(events)
    assert output.flush() == 4
    output.close()
    messages = read_all(kafka_bootstrap, [f"{prefix}.public.orders"])
    got: dict[int, list[Any]] = {}
    for m in sorted(messages, key=lambda m: (m.seq, m.partition, m.offset)):
        value = None if m.value is None else orjson.loads(m.value)["op"]
        got.setdefault(m.seq, []).append((m.key, value))
        if m.key is not None:
            assert m.partition == java_partition(m.key, 3)
    k1, k2 = b'{"id":1}', b'{"id":2}'
    assert got[1] == [(k1, "c")]
    assert sorted(got[2], key=lambda r: r[0] or b"") == sorted([(k1, "d"), (k1, None),
                                                                (k2, "c")],
                                                               key=lambda r: r[0] or b"")
    old_key_records = [r for r in got[2] if r[0] == k1]
    assert old_key_records == [(k1, "d"), (k1, None)]  # in this order, in one partition
    assert got[3] == [(k2, "d"), (k2, None)]
    assert got[4] == [(None, "t")] * 3
