"""Reference consumers of debezium-json and canal-json, written only from Debezium's and
Canal's published field definitions (and what Flink's formats require of them), not from
dblog's encoders. Each rebuilds the source tables from a stream of records, strictly as a
retracting consumer (Flink) must be able to: an update or delete must carry the old row, and
that old row must equal the row the consumer holds; an update must not change the key (a key
change is a delete and a create); an unknown operation is an error.

Tables come out in canonical form keyed like ``dblog.testing.replay``:
``{((schema, table), key tuple): row}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from tests.changelog_values import (
    canal_reverse,
    debezium_reverse,
    interval_parts,
    timetz_utc,
    type_parts,
)

TableName = tuple[str, str]
Rows = dict[tuple[TableName, tuple[Any, ...]], dict[str, Any]]


class ConsumerError(AssertionError):
    """The stream broke what the published format promises its consumers."""


class Ddl:
    """What the consumer's user declares per table (as in a Flink DDL): the columns' source
    types and the primary key."""

    def __init__(self, family: str, tables: Mapping[TableName, tuple[dict[str, str],
                                                                      tuple[str, ...]]]) -> None:
        self.family = family
        self.tables = dict(tables)

    def key_of(self, table: TableName, row: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(row[k] for k in self.tables[table][1])


class _Store:
    def __init__(self) -> None:
        self.rows: Rows = {}

    def held(self, table: TableName, key: tuple[Any, ...]) -> dict[str, Any] | None:
        return self.rows.get((table, key))

    def retract(self, table: TableName, key: tuple[Any, ...], before: dict[str, Any],
                what: str) -> None:
        held = self.held(table, key)
        if held is None:
            raise ConsumerError(f"{what} of {table} {key}: no such row held")
        if held != before:
            raise ConsumerError(f"{what} of {table} {key}: before {before} != held {held}")
        del self.rows[(table, key)]

    def truncate(self, table: TableName) -> None:
        for entry in [k for k in self.rows if k[0] == table]:
            del self.rows[entry]


class DebeziumConsumer(_Store):
    """Applies Debezium change events (``before``, ``after``, ``source``, ``op``)."""

    def __init__(self, ddl: Ddl) -> None:
        super().__init__()
        self.ddl = ddl
        self.ops: dict[str, int] = {}

    def row(self, table: TableName, image: Mapping[str, Any]) -> dict[str, Any]:
        types = self.ddl.tables[table][0]
        return {name: debezium_reverse(self.ddl.family, types[name])(value)
                for name, value in image.items()}

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        if value is None:
            return  # a tombstone: for log compaction only
        event = orjson.loads(value)
        source, op = event["source"], event["op"]
        table = (source.get("schema") or source["db"], source["table"])
        self.ops[op] = self.ops.get(op, 0) + 1
        if op == "t":
            self.truncate(table)
            return
        before = None if event["before"] is None else self.row(table, event["before"])
        after = None if event["after"] is None else self.row(table, event["after"])
        image = after if after is not None else before
        if image is None:
            raise ConsumerError(f"op {op} without before and after: {event}")
        row_key = self.ddl.key_of(table, image)
        if key is not None and tuple(self.row(table, orjson.loads(key)).values()) != row_key:
            raise ConsumerError(f"record key {key!r} is not the row's key {row_key}")
        self._apply(op, table, row_key, before, after)

    def _apply(self, op: str, table: TableName, key: tuple[Any, ...],
               before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        if op in ("c", "r"):
            if op == "c" and self.held(table, key) is not None:
                raise ConsumerError(f"create of {table} {key}: the row exists")
            assert after is not None
            self.rows[(table, key)] = after
        elif op in ("u", "d"):
            if before is None:
                raise ConsumerError(f"'{op}' of {table} {key} has a null 'before' (Flink: "
                                    "set REPLICA IDENTITY FULL)")
            if self.ddl.key_of(table, before) != key:
                raise ConsumerError(f"'{op}' of {table} changes the key: {before} -> {after}")
            self.retract(table, key, before, op)
            if op == "u":
                assert after is not None
                self.rows[(table, key)] = after
        else:
            raise ConsumerError(f"unknown op {op!r}")


class CanalConsumer(_Store):
    """Applies Canal flat messages (``data``, ``old``, ``type``, ``pkNames``, ``sqlType``)."""

    def __init__(self, family: str) -> None:
        super().__init__()
        self.family = family
        self.types: dict[str, int] = {}

    def _rows(self, message: dict[str, Any], images: list[dict[str, Any]] | None
              ) -> list[dict[str, Any]]:
        mysql_types, sql_types = message["mysqlType"], message["sqlType"]
        return [{name: canal_reverse(self.family, mysql_types[name], sql_types[name])(value)
                 for name, value in image.items()} for image in images or ()]

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        if value is None:
            return
        message = orjson.loads(value)
        kind, table = message["type"], (message["database"], message["table"])
        self.types[kind] = self.types.get(kind, 0) + 1
        if kind == "TRUNCATE":
            self.truncate(table)
            return
        if kind not in ("INSERT", "UPDATE", "DELETE"):
            raise ConsumerError(f"unknown type {kind!r}")
        rows, pk = self._rows(message, message["data"]), message["pkNames"]
        if not rows:
            raise ConsumerError(f"{kind} without data: {message}")
        old = self._old(message, rows) if kind == "UPDATE" else None
        for index, row in enumerate(rows):
            row_key = tuple(row[k] for k in pk)
            if kind == "INSERT":
                self.rows[(table, row_key)] = row
                continue
            before = row if old is None else {**row, **old[index]}
            if tuple(before[k] for k in pk) != row_key:
                raise ConsumerError(f"UPDATE of {table} changes the key: {before} -> {row}")
            self.retract(table, row_key, before, kind)
            if kind == "UPDATE":
                self.rows[(table, row_key)] = row

    def _old(self, message: dict[str, Any], rows: list[dict[str, Any]]
             ) -> list[dict[str, Any]]:
        if message["old"] is None or len(message["old"]) != len(rows):
            raise ConsumerError(f"UPDATE without 'old' for each row: {message}")
        return self._rows(message, message["old"])


def debezium_expected(family: str, types: Mapping[str, str], row: Mapping[str, Any]
                      ) -> dict[str, Any]:
    """A source row in the form a Debezium consumer can rebuild: a timetz as its UTC instant
    (ZonedTime), an interval as its parts (the ISO text is not PostgreSQL's)."""
    out = dict(row)
    if family != "postgresql":
        return out
    for name, value in row.items():
        base = type_parts(types[name])[0]
        if value is not None and base == "time with time zone":
            out[name] = timetz_utc(value)
        elif value is not None and base == "interval":
            out[name] = interval_parts(value)
    return out


def apply_lines(consumer: DebeziumConsumer | CanalConsumer, lines: Iterable[bytes]) -> None:
    for line in lines:
        if line.strip():
            consumer.apply(None, line)


def differences(actual: Rows, expected: Rows) -> list[tuple[Any, ...]]:
    """(row, column, rebuilt value, source value) of every cell that differs; missing and
    extra rows as (row, None, rebuilt, source)."""
    out: list[tuple[Any, ...]] = []
    for entry in sorted(actual.keys() | expected.keys(), key=repr):
        mine, theirs = actual.get(entry), expected.get(entry)
        if mine is None or theirs is None:
            out.append((entry, None, mine, theirs))
            continue
        for column in sorted(mine.keys() | theirs.keys()):
            if mine.get(column, "<absent>") != theirs.get(column, "<absent>"):
                out.append((entry, column, mine.get(column, "<absent>"),
                            theirs.get(column, "<absent>")))
    return out
