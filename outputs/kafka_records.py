"""From events to Kafka records: topic, partition, key, value and headers (no I/O).

The format (native, debezium-json, canal-json) encodes each event's keyed records; this module
adds what the transport owes a Kafka consumer:

* **topic** per table from the ``topic`` template (characters Kafka refuses become ``_``);
* **tombstones**: after the record of a delete, a record with the same key and a null value,
  so log compaction removes the key; a key change becomes the delete of the old key, its
  tombstone, then the record of the new key (formats that keep a key change as one record,
  like native, get the old key's delete from the same format);
* **table-level events** (truncate, schema change) go to *every* partition of the table's
  topic, so each partition orders them with its own rows; the rows of a table without a key
  go, without a key, to partition 0, in order (and get no tombstone: nothing to compact);
* tombstones only where the transport's ``tombstones`` and the format's
  :class:`~dblog.formats.base.TombstonePolicy` both allow them (canal-json: never);
* **transaction markers** (BEGIN/COMMIT) go to ``transaction_topic`` partition 0 when set,
  else nowhere;
* **headers** ``dblog.seq`` (the event's sequence number), ``dblog.pos`` (its source
  position), ``dblog.epoch`` (the leader epoch that wrote it) and ``dblog.op``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import orjson

from dblog.core.model import TABLE_OPS, ChangeEvent, Op, TableId, TableInfo
from dblog.formats.base import Format, Record, TombstonePolicy
from dblog.formats.native import NativeFormat
from dblog.formats.schema import encode_following_schema
from dblog.outputs.kafka_config import topic_name

Headers = list[tuple[str, str | bytes | None]]
ANY_PARTITION = -1
"""librdkafka's RD_KAFKA_PARTITION_UA: the configured partitioner chooses (murmur2 of the key)."""


class KafkaRecord(NamedTuple):
    """One record to produce; ``seq`` is its event's (an event may have several records)."""

    topic: str
    key: bytes | None
    value: bytes | None
    partition: int
    headers: Headers
    seq: int


def with_tombstones(records: list[Record], event: ChangeEvent) -> list[Record]:
    """``records`` of one event with a tombstone after each deleted key (see module doc)."""
    if not records:
        return records
    if event.op is Op.DELETE:
        last = records[-1]
        if last.value is not None and last.key is not None:
            return [*records, Record(last.key, None)]
        return records
    if event.op is Op.UPDATE and event.old_key is not None:
        new_key = records[-1].key
        old = [i for i, r in enumerate(records) if r.key is not None and r.key != new_key]
        if old and records[old[-1]].value is not None:
            at = old[-1] + 1
            return [*records[:at], Record(records[old[-1]].key, None), *records[at:]]
    return records


def old_key_delete(event: ChangeEvent) -> ChangeEvent:
    """The delete of a key change's old key, for formats that keep a key change as one
    record: same seq, position and transaction, ``before`` as logged."""
    return ChangeEvent(Op.DELETE, event.table, event.old_key, before=event.before,
                       position=event.position, txid=event.txid, commit_ts=event.commit_ts,
                       seq=event.seq)


class RecordPlanner:
    """Turns events into :class:`KafkaRecord` s. ``partitions(topic)`` gives a topic's
    partition count (a metadata request; cached by the caller) for table-level events."""

    def __init__(self, fmt: Format, template: str, topic_values: dict[str, str],
                 transaction_topic: str | None, tombstones: bool,
                 partitions: Callable[[str], int],
                 tables: Callable[[TableId], TableInfo | None]) -> None:
        self.format, self.template, self.values = fmt, template, topic_values
        self.transaction_topic = transaction_topic
        self.tombstones = tombstones and (not isinstance(fmt, TombstonePolicy)
                                          or fmt.emits_tombstones())
        self.partitions, self.tables = partitions, tables
        self._native = isinstance(fmt, NativeFormat)
        self.epoch = b"0"
        self._topics: dict[TableId, str] = {}
        self._pos: tuple[object, bytes] = (None, b"")
        self.table_of: dict[str, TableId] = {}
        """Which table a topic carries (for error messages)."""

    def set_epoch(self, epoch: int) -> None:
        self.epoch = str(epoch).encode()

    def topic(self, table: TableId) -> str:
        topic = self._topics.get(table)
        if topic is None:
            topic = topic_name(self.template, schema=table.schema, table=table.name,
                               **self.values)
            self._topics[table] = topic
            self.table_of[topic] = table
        return topic

    def headers(self, event: ChangeEvent) -> Headers:
        position = event.position
        if position is not self._pos[0]:  # the rows of a chunk share one position
            self._pos = (position, b"" if position is None else str(position).encode())
        headers: Headers = [("dblog.seq", b"%d" % event.seq), ("dblog.epoch", self.epoch),
                            ("dblog.op", _OPS[event.op])]
        if position is not None:
            headers.append(("dblog.pos", self._pos[1]))
        return headers

    def plan_batch(self, events: Sequence[ChangeEvent]) -> list[KafkaRecord]:
        """The records of ``events``, in order. With the native format, the events that
        become one keyed record each (inserts, dump rows, updates that keep their key) are
        encoded in one ``encode_lines`` call (one line per event, msgspec for dump rows)."""
        if not self._native:
            return [r for e in events for r in self.plan(e)]
        flags = [_simple(e) for e in events]
        simple = [e for e, flag in zip(events, flags, strict=True) if flag]
        lines = iter(self.format.encode_lines(simple).split(b"\n")) if simple else iter(())
        out: list[KafkaRecord] = []
        headers, dumps, last_table, topic = self.headers, orjson.dumps, None, ""
        for e, flag in zip(events, flags, strict=True):
            if not flag:
                out.extend(self.plan(e))
                continue
            if e.table is not last_table:  # the rows of a chunk share one table id
                last_table, topic = e.table, self.topic(e.table)  # type: ignore[arg-type]
            out.append(KafkaRecord(topic, dumps(e.key), next(lines), ANY_PARTITION,
                                   headers(e), e.seq))
        return out

    def plan(self, event: ChangeEvent) -> list[KafkaRecord]:
        """The records of ``event`` in the order they must be sent."""
        table, seq = event.table, event.seq
        if table is None:  # BEGIN / COMMIT
            if self.transaction_topic is None:
                return []  # a format without markers (canal-json) gives no record at all
            return [KafkaRecord(self.transaction_topic, r.key, r.value, 0, self.headers(event),
                                seq) for r in self.format.encode_records(event)
                    if r.value is not None]
        records = self._records(event, table)
        if not records:
            return []
        topic, headers = self.topic(table), self.headers(event)
        out: list[KafkaRecord] = []
        table_level = event.op in TABLE_OPS
        for record in records:
            if record.key is None and table_level:  # one copy per partition
                out.extend(KafkaRecord(topic, None, record.value, p, headers, seq)
                           for p in range(self.partitions(topic)))
            elif record.key is None:  # a row of a table without a key: one partition, in order
                out.append(KafkaRecord(topic, None, record.value, 0, headers, seq))
            else:
                out.append(KafkaRecord(topic, record.key, record.value, ANY_PARTITION,
                                       headers, seq))
        return out

    def _records(self, event: ChangeEvent, table: TableId) -> list[Record]:
        records = encode_following_schema(self.format, self.tables, table,
                                          lambda info: self._encoded(event, info))
        if not self.tombstones:  # also those the format made
            return [r for r in records if r.value is not None or r.key is None]
        if event.op is not Op.DELETE and event.old_key is None:
            return records
        return with_tombstones(records, event)


    def _encoded(self, event: ChangeEvent, info: TableInfo | None) -> list[Record]:
        records = self.format.encode_records(event, info)
        if event.old_key is not None and event.op is Op.UPDATE and records and \
                all(r.key == records[-1].key for r in records):
            # the old key's delete whether or not tombstones follow it: without it a
            # consumer keyed by the old key (or a compacted topic) keeps the old row
            records = self.format.encode_records(old_key_delete(event), info) + records
        return records


_OPS = {op: op.value.encode() for op in Op}
_SIMPLE = frozenset({Op.INSERT, Op.READ, Op.UPDATE})


def _simple(e: ChangeEvent) -> bool:
    """One keyed record in the native format (no tombstone, no key change, a table)."""
    return e.op in _SIMPLE and e.old_key is None and e.key is not None and e.table is not None
