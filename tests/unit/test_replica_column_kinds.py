"""Unit tests of the replica outputs' shared metadata helpers in :mod:`dblog.outputs.sql_kinds`:
the source table's metadata required, its column kinds, and the kinds of columns that rows
bring before the metadata knows them."""

from __future__ import annotations

from pathlib import Path

import pytest

from dblog.core.model import ChangeEvent, ColumnInfo, Op, Row, TableId, TableInfo
from dblog.errors import FatalOutputError
from dblog.outputs.sql import SqlOutput, read_live
from dblog.outputs.sql_kinds import (
    ColumnKind,
    Kind,
    add_row_kinds,
    kind_of,
    kind_of_value,
    kinds_of,
    require_info,
)
from tests.unit.test_replica_sim import lsn

T = TableId("s", "t")
INFO = TableInfo(T, (ColumnInfo("id", "integer"), ColumnInfo("name", "text"),
                     ColumnInfo("added", "numeric(10,2)")), ("id",))


class Lookup:
    def __init__(self, info: TableInfo | None) -> None:
        self.info, self.calls = info, 0

    def __call__(self) -> TableInfo | None:
        self.calls += 1
        return self.info


def test_kinds_of_maps_every_column_by_its_type() -> None:
    assert kinds_of(INFO) == {"id": kind_of("integer"), "name": kind_of("text"),
                              "added": kind_of("numeric(10,2)")}


def test_require_info_returns_the_metadata_or_names_how_to_give_it() -> None:
    assert require_info({T: INFO}.get, T, "out", "SqlOutput") is INFO
    none: dict[TableId, TableInfo] = {}
    with pytest.raises(FatalOutputError) as caught:
        require_info(none.get, T, "delta:/x", "DeltaOutput")
    assert caught.value.message == "delta:/x: no metadata for source table s.t"
    assert caught.value.fix == ("give the output the source's table metadata "
                                "(DeltaOutput(..., tables=lookup) or set_tables)")


def test_rows_within_the_known_columns_add_nothing_and_ask_nothing() -> None:
    kinds = {"id": kind_of("integer"), "name": kind_of("text")}
    lookup = Lookup(INFO)
    rows: list[Row | None] = [{"id": 1, "name": "a"}, None, {"id": 2}]
    assert add_row_kinds(kinds, rows, lookup) is False
    assert lookup.calls == 0 and set(kinds) == {"id", "name"}


def test_a_new_column_takes_the_metadatas_type_else_its_first_values_kind() -> None:
    kinds = {"id": kind_of("integer"), "name": kind_of("text")}
    lookup = Lookup(INFO)
    rows: list[Row | None] = [{"id": 1, "added": "1.50", "extra": 7},
                              {"id": 2, "extra": "text now", "more": True}]
    assert add_row_kinds(kinds, rows, lookup) is True
    assert kinds["added"] == kind_of("numeric(10,2)")  # the metadata's, not a string's
    assert kinds["extra"] == kind_of_value(7) == ColumnKind(Kind.INT)  # the first value's
    assert kinds["more"] == ColumnKind(Kind.BOOL)
    assert lookup.calls == 1


def test_without_metadata_every_new_column_takes_its_values_kind() -> None:
    kinds = {"id": kind_of("integer")}
    lookup = Lookup(None)
    assert add_row_kinds(kinds, [{"id": 1, "added": 2.5}], lookup) is True
    assert kinds["added"] == ColumnKind(Kind.FLOAT) and lookup.calls == 1


def test_a_new_column_is_never_typed_from_none() -> None:
    """All None and unknown to the metadata: deferred (not JSON); the first value, or the
    metadata naming it, adds it."""
    kinds = {"id": kind_of("integer")}
    rows: list[Row | None] = [{"id": 1, "late": None, "added": None},
                              {"id": 2, "late": None, "added": None}]
    assert add_row_kinds(kinds, rows, Lookup(None)) is False
    assert set(kinds) == {"id"}
    assert add_row_kinds(kinds, [*rows, {"id": 3, "late": "x"}], Lookup(None)) is True
    assert kinds["late"] == ColumnKind(Kind.TEXT) and "added" not in kinds
    assert add_row_kinds(kinds, rows, Lookup(INFO)) is True
    assert kinds["added"] == kind_of("numeric(10,2)")


def test_postgresql_bit_strings_are_text_mysql_bits_integers() -> None:
    """One type name, two meanings: PostgreSQL's bit(n) value is "0101" (an integer would
    drop the leading zero), MySQL's an integer; the source's metadata says which."""
    assert kind_of("bit(4)", "postgresql") == ColumnKind(Kind.TEXT)
    assert kind_of("bit(64)", "postgresql") == ColumnKind(Kind.TEXT)
    assert kind_of("bit varying(8)", "postgresql") == ColumnKind(Kind.TEXT)
    assert kind_of("bit(4)") == kind_of("bit(4)", "mysql") == ColumnKind(Kind.INT)
    columns = (ColumnInfo("id", "integer"), ColumnInfo("flags", "bit(4)"))
    pg = TableInfo(T, columns, ("id",), extra={"flavour": "postgresql"})
    assert kinds_of(pg)["flags"] == ColumnKind(Kind.TEXT)
    assert kinds_of(TableInfo(T, columns, ("id",)))["flags"] == ColumnKind(Kind.INT)
    kinds = {"id": kind_of("integer")}
    assert add_row_kinds(kinds, [{"id": 1, "flags": "0101"}], Lookup(pg)) is True
    assert kinds["flags"] == ColumnKind(Kind.TEXT)


def test_a_postgresql_bit_string_round_trips_through_a_sqlite_replica(tmp_path: Path) -> None:
    columns = (ColumnInfo("id", "integer"), ColumnInfo("flags", "bit(4)"))
    info = TableInfo(T, columns, ("id",), extra={"flavour": "postgresql"})
    out = SqlOutput({"type": "sql", "url": f"sqlite:///{tmp_path / 'r.db'}"},
                    tables={T: info}.get)
    out.bind("p", 1)
    out.open(0)
    out.write([ChangeEvent(Op.BEGIN, None, position=lsn(0x100), seq=1),
               ChangeEvent(Op.INSERT, T, (1,), None, {"id": 1, "flags": "0101"}, lsn(0x90),
                           seq=2),
               ChangeEvent(Op.COMMIT, None, position=lsn(0x100), seq=3)])
    out.flush()
    assert read_live(out.config, info) == {(1,): {"id": 1, "flags": "0101"}}
    out.close()
