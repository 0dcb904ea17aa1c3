"""The event model: what flows from a source connector through the engine to outputs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import msgspec
import orjson

from dblog.core.positions import Position

Key = tuple[Any, ...]
"""A primary key in canonical form: one normalised value per key column, in key order."""

Row = dict[str, Any]
"""A row image: column name to canonical value (see docs/formats.md)."""


class EncodedRow:
    """A row image the source already encoded as one JSON object with canonical values (the
    dump fast path). Outputs embed ``json`` (UTF-8 text or bytes) as is; :meth:`decode` gives
    the :data:`Row`."""

    __slots__ = ("json",)

    def __init__(self, json: str | bytes) -> None:
        self.json = json

    def decode(self) -> Row:
        row: Row = orjson.loads(self.json)
        return row

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EncodedRow) and self.decode() == other.decode()

    def __hash__(self) -> int:
        # consistent with __eq__, which compares decoded rows (text or bytes, any key order)
        return hash(orjson.dumps(self.decode(), option=orjson.OPT_SORT_KEYS))

    def __repr__(self) -> str:
        return f"EncodedRow({self.json!r})"


RowImage = Row | EncodedRow


class Op(str, Enum):
    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"
    READ = "read"
    TRUNCATE = "truncate"
    SCHEMA = "schema"
    BEGIN = "begin"
    COMMIT = "commit"


ROW_OPS = frozenset({Op.INSERT, Op.UPDATE, Op.DELETE, Op.READ})
TABLE_OPS = frozenset({Op.TRUNCATE, Op.SCHEMA})


@dataclass(frozen=True, slots=True, order=True)
class TableId:
    schema: str
    name: str

    @classmethod
    def parse(cls, text: str, default_schema: str = "public") -> TableId:
        schema, dot, name = text.partition(".")
        if not dot:
            return cls(default_schema, schema)
        return cls(schema, name)

    @classmethod
    def coerce(cls, value: str | TableId) -> TableId:
        return value if isinstance(value, TableId) else cls.parse(value)

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}"


class ChangeEvent(msgspec.Struct, gc=False):
    """One event of the stream.

    ``key`` is the key of the row after the change (before it for deletes); ``old_key`` is set
    only when an update changed the key. ``unchanged`` names columns the source did not send
    (PostgreSQL TOAST): they are absent from ``after`` and keep their previous value.
    ``seq`` is assigned by the engine when the event is emitted. ``types``: column name to
    the type the row was logged under, where the source logs it (PostgreSQL; one mapping
    shared by a table's events until a type changes, never modified): formats map values
    by it rather than by the catalog, which may be newer or older (a retyped column).

    A msgspec struct rather than a dataclass: one is built per row and per log change, and a
    struct's constructor costs less than half as much. Events never form reference cycles, so
    they stay out of the cyclic garbage collector (``gc=False``).
    """

    op: Op
    table: TableId | None
    key: Key | None = None
    before: Row | None = None
    after: RowImage | None = None
    position: Position | None = None
    txid: int | None = None
    commit_ts: str | None = None
    old_key: Key | None = None
    unchanged: tuple[str, ...] = ()
    dump_id: str | None = None
    seq: int = -1
    types: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Watermark:
    """A write to this instance's watermark row seen in the log (never reaches outputs)."""

    value: str
    position: Position | None = None


@dataclass(frozen=True, slots=True)
class ColumnInfo:
    name: str
    type_name: str


@dataclass(frozen=True, slots=True)
class TableInfo:
    table: TableId
    columns: tuple[ColumnInfo, ...]
    key_columns: tuple[str, ...]
    estimated_rows: int = 0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


LogItem = ChangeEvent | Watermark
"""What a log reader yields, in log order. BEGIN/COMMIT come as ChangeEvents with no table."""
