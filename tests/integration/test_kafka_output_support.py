"""Helpers of the Kafka output tests (no tests here): reading topics back as a consumer does,
rebuilding tables from them, and Java's murmur2 partitioner.

Two independent readings of what Kafka holds:

* :func:`rebuild` is a per-partition consumer (a KTable): each key's records are in one
  partition, in order; the last record of a key decides (a tombstone or a delete removes it,
  a truncate empties the partition). It needs no global order, only per-key order.
* :func:`stream_view` puts the native documents back in stream order by their ``dblog.seq``
  header (one document per event: the one whose ``op`` is the ``dblog.op`` header), for the
  stream checks of the central suite (commit order, no time travel, replay).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient


@dataclass(frozen=True)
class Msg:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]

    @property
    def seq(self) -> int:
        return int(self.headers["dblog.seq"])

    def doc(self) -> dict[str, Any]:
        assert self.value is not None
        parsed: dict[str, Any] = orjson.loads(self.value)
        return parsed


def topics_with_prefix(bootstrap: str, prefix: str) -> list[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = admin.list_topics(timeout=30).topics
    return sorted(t for t in names if t.startswith(prefix + ".") and "checkpoint" not in t)


def read_all(bootstrap: str, topics: list[str], isolation: str = "read_committed",
             timeout: float = 120.0) -> list[Msg]:
    """Every record of ``topics`` up to their current end, per partition in offset order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        ends = _ends(consumer, topics)
        consumer.assign([TopicPartition(t, p, 0) for (t, p) in ends])
        return _consume(consumer, ends, timeout)
    finally:
        consumer.close()


def _ends(consumer: Consumer, topics: list[str]) -> dict[tuple[str, int], int]:
    ends = {}
    meta = consumer.list_topics(timeout=30)
    for topic in topics:
        for partition in meta.topics[topic].partitions:
            offsets = consumer.get_watermark_offsets(TopicPartition(topic, partition), 30)
            assert offsets is not None
            ends[(topic, partition)] = offsets[1]
    return ends


def _consume(consumer: Consumer, ends: dict[tuple[str, int], int],
             timeout: float) -> list[Msg]:
    out: list[Msg] = []
    waiting = {tp for tp, end in ends.items() if end > 0}
    deadline = time.monotonic() + timeout
    while waiting:
        assert time.monotonic() < deadline, f"partitions {waiting} not read to their end"
        message = consumer.poll(0.5)
        if message is None:
            continue
        tp = (message.topic() or "", message.partition() or 0)
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                raise KafkaException(error)
            if (message.offset() or 0) >= ends[tp]:
                waiting.discard(tp)
            continue
        raw = message.headers() or []
        pairs = raw.items() if isinstance(raw, dict) else raw
        headers = {k: v if isinstance(v, bytes) else (v or "").encode() for k, v in pairs}
        out.append(Msg(tp[0], tp[1], message.offset() or 0, message.key(), message.value(),
                       headers))
    return out


def rebuild(messages: list[Msg]) -> dict[Any, dict[str, Any]]:
    """The tables a per-partition consumer holds, keyed like ``Kit.source_rows``."""
    tables: dict[str, tuple[str, str]] = {}
    rows: dict[tuple[str, int], dict[Any, dict[str, Any]]] = {}
    for m in messages:
        part = rows.setdefault((m.topic, m.partition), {})
        if m.value is None:
            assert m.key is not None, f"a tombstone without a key: {m}"
            part.pop((tables[m.topic], tuple(orjson.loads(m.key))), None)
            continue
        doc = m.doc()
        table = tables.setdefault(m.topic, (doc["schema"], doc["table"]))
        op = doc["op"]
        if op == "truncate":
            part.clear()
            continue
        if op == "schema":
            continue
        key = (table, tuple(doc["key"]))
        if op == "delete":
            part.pop(key, None)
            continue
        assert m.key == orjson.dumps(doc["key"]), f"record key {m.key!r} is not the doc's key"
        row = {**part.get(key, {}), **doc["after"]} if doc.get("unchanged") else doc["after"]
        part[key] = row
    return {k: v for part in rows.values() for k, v in part.items()}


def stream_view(messages: list[Msg]) -> list[dict[str, Any]]:
    """One native document per seq, in seq order (duplicates must agree)."""
    by_seq: dict[int, dict[str, Any]] = {}
    for m in messages:
        if m.value is None:
            continue
        doc = m.doc()
        if doc["op"] != m.headers["dblog.op"].decode():
            continue  # the old key's delete of a key change
        seen = by_seq.setdefault(m.seq, doc)
        assert seen == doc, f"two different documents for seq {m.seq}: {seen} / {doc}"
    return [by_seq[s] for s in sorted(by_seq)]


def repeated(messages: list[Msg]) -> list[tuple[str, int, int, bytes | None, bool]]:
    """Records that appear more than once (same partition, seq, key and kind)."""
    counts = Counter((m.topic, m.partition, m.seq, m.key, m.value is None) for m in messages)
    return [k for k, n in counts.items() if n > 1]


def murmur2(data: bytes) -> int:
    """Kafka's Java ``Utils.murmur2`` (seed 0x9747b28c), as a signed 32-bit int."""
    m, r, length = 0x5BD1E995, 24, len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = data[length - length % 4:]
    if len(tail) >= 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def java_partition(key: bytes, partitions: int) -> int:
    """Java's default partitioner for a keyed record: ``toPositive(murmur2(key)) % n``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
