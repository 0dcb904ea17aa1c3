"""Formats across schema changes: a row whose columns its table's metadata does not have.

A changelog format maps each column by the type the source's catalog gives it (the engine's
:class:`~dblog.engine.catalog.TableCatalog`, read once per table). The catalog and a row can
disagree in two ways, and a column unknown to the metadata alone cannot tell which:

* the metadata is **older** than the row: a column was added after the catalog was read.
  MySQL/MariaDB log the ALTER and the engine drops the table's entry, but PostgreSQL logs no
  schema events, so an ``ALTER TABLE ... ADD COLUMN`` while the pipeline runs used to stop the
  output for good;
* the metadata is **newer** than the row: a backlog logged before an ALTER (the pipeline was
  down, or behind) still carries a column dropped or renamed since.

:func:`encode_following_schema` reads the table's metadata again (once) when a row holds an
unknown column. If the fresh metadata has it, the first case held, and the row maps by its
type like any other. If not, the column is gone from the source: no type can be learned for
it any more, and the only ways on are to stop forever or to write it as captured; the format
passes it through from then on (:class:`SchemaFollowingFormat`), with one warning naming the
table and columns. Neither path drops a value or a row, and a column the catalog knows is
always mapped by its type, so log and dump events of one column keep one form.

A column's **type** can change too (PostgreSQL's ``ALTER COLUMN ... TYPE`` logs no schema
event), and a value of the new type often fits the old one (a timestamp is text, 8 an
integer). An event whose source logs each column's type (``ChangeEvent.types``: wal2json's)
is mapped by those types (:class:`LoggedTypes`), so a value goes out in the form of the type
it was logged under, whether the metadata is older (a retype while running) or newer (a
backlog logged before it). Where they differ, the metadata is read again once per change
(``retyped``, :class:`TypeFollowingFormat`), so dump rows, which carry no types, follow too.

Events without logged types (MySQL/MariaDB, whose schema events drop the metadata, and dump
rows): a value that does not fit its column's cached type makes the metadata be read again
once (e.g. timestamptz to text); if the fresh type does not fit it either (a backlog logged
under an older type), the output stops as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar, runtime_checkable

from dblog.core.model import ColumnInfo, TableId, TableInfo
from dblog.formats.base import TableLookup
from dblog.formats.rows import UnknownColumns, UnmappableValue

T = TypeVar("T")

MAX_ROUNDS = 4
"""Unknown columns a row may reveal in turn (its after and before images, an old key's
delete): each round passes more of them through, so the loop ends."""


@runtime_checkable
class RefreshableLookup(Protocol):
    """A table lookup that can read a table's metadata again (the engine's catalog)."""

    def __call__(self, table: TableId) -> TableInfo | None: ...

    def refresh(self, table: TableId) -> TableInfo | None: ...


@runtime_checkable
class SchemaFollowingFormat(Protocol):
    """A format that can write columns its table's metadata no longer has, as captured."""

    def tolerate(self, table: TableId, columns: frozenset[str]) -> None: ...


class TypeFollowingFormat(Protocol):
    """A format that maps values by the types they were logged under; ``retyped`` holds the
    tables whose metadata it found to disagree with them (to be read again, then removed)."""

    retyped: set[TableId]


def encode_following_schema(fmt: object, tables: TableLookup, table: TableId,
                            encode: Callable[[TableInfo | None], T]) -> T:
    """``encode(metadata of table)``; on unknown columns, with fresh metadata, then with the
    columns the source no longer has passed through; after an event logged under other types
    than the metadata's (``fmt.retyped``), the metadata is read again (see the module's
    docstring)."""
    try:
        encoded = encode(tables(table))
    except UnknownColumns as exc:
        unknown = exc
    except UnmappableValue:
        if not isinstance(tables, RefreshableLookup):
            raise
        return encode(tables.refresh(table))  # a type changed since the metadata was read
    else:
        retyped: set[TableId] | None = getattr(fmt, "retyped", None)
        if retyped:  # rare: an event logged under other types than the metadata's
            _refresh(retyped, tables)
        return encoded
    if isinstance(tables, RefreshableLookup):
        try:
            return encode(tables.refresh(table))
        except UnknownColumns as exc:
            unknown = exc
    if not isinstance(fmt, SchemaFollowingFormat):
        raise unknown
    for _ in range(MAX_ROUNDS):
        fmt.tolerate(table, unknown.columns)
        try:
            return encode(tables(table))
        except UnknownColumns as exc:
            unknown = exc
    raise unknown


def _refresh(retyped: set[TableId], tables: TableLookup) -> None:
    while retyped:
        table = retyped.pop()
        if isinstance(tables, RefreshableLookup):
            tables.refresh(table)


def same_type(logged: str, declared: str) -> bool:
    """Whether a logged type name is the declared one; an empty name (not logged) is, and so
    is one qualified by its schema where the other is not (``format_type`` qualifies names
    outside the session's search path, which two sessions may not share)."""
    return logged == declared or not logged or \
        logged.rpartition(".")[2] == declared.rpartition(".")[2]


class LoggedTypes:
    """A format's view of each table's metadata with the column types an event was logged
    under (:func:`info`): the metadata itself where they agree (the same object, so caches
    keyed on it hold), else a copy with the logged types, made once per metadata and types."""

    def __init__(self) -> None:
        self.retyped: set[TableId] = set()
        self._last: tuple[Any, Any, Any] = (None, None, None)
        self._tables: dict[TableId, tuple[TableInfo, Mapping[str, str], TableInfo]] = {}
        self._asked: dict[TableId, Mapping[str, str]] = {}

    def info(self, info: TableInfo, types: Mapping[str, str]) -> TableInfo:
        last = self._last
        if last[0] is info and last[1] is types:
            return last[2]  # type: ignore[no-any-return]
        cached = self._tables.get(info.table)
        if cached is None or cached[0] is not info or cached[1] is not types:
            cached = self._tables[info.table] = (info, types, self._derive(info, types))
        self._last = cached
        return cached[2]

    def _derive(self, info: TableInfo, types: Mapping[str, str]) -> TableInfo:
        logged = {c.name: types[c.name] for c in info.columns
                  if c.name in types and not same_type(types[c.name], c.type_name)}
        if not logged:
            return info
        if self._asked.get(info.table) is not types:  # once per change, not per event
            self._asked[info.table] = types
            self.retyped.add(info.table)
        columns = tuple(ColumnInfo(c.name, logged.get(c.name, c.type_name))
                        for c in info.columns)
        return TableInfo(info.table, columns, info.key_columns, info.estimated_rows,
                         info.extra)
