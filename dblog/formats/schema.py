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

A value that does not fit its column's cached type makes the metadata be read again once too
(a type changed while the pipeline runs, e.g. timestamptz to text); if the fresh type does not
fit it either (a backlog logged under an older type), the output stops as before. A value of a
new type that happens to fit the old one (text to timestamptz) is not noticed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar, runtime_checkable

from dblog.core.model import TableId, TableInfo
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


def encode_following_schema(fmt: object, tables: TableLookup, table: TableId,
                            encode: Callable[[TableInfo | None], T]) -> T:
    """``encode(metadata of table)``; on unknown columns, with fresh metadata, then with the
    columns the source no longer has passed through (see the module's docstring)."""
    try:
        return encode(tables(table))
    except UnknownColumns as exc:
        unknown = exc
    except UnmappableValue:
        if not isinstance(tables, RefreshableLookup):
            raise
        return encode(tables.refresh(table))  # a type changed since the metadata was read
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
