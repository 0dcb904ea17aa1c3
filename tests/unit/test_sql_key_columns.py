"""MySQL/MariaDB text key columns of the SQL output (outputs/sql_kinds.py, sql_keys.py): a
binary NO PAD collation, a length from the source type, and keys the column cannot hold as
the source's own refused with the fix before anything is written."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from dblog.core.model import ColumnInfo, TableId, TableInfo
from dblog.errors import FatalOutputError
from dblog.outputs.sql_keys import KeyText, check_keys
from dblog.outputs.sql_kinds import (
    MYSQL_KEY_MAX,
    Kind,
    kind_of,
    kinds_of,
    mysql_key_collation,
    sa_type,
)
from dblog.outputs.sql_schema import ReplicaTable, build_table

T = TableId("public", "docs")
ENGINE = sa.create_engine("mysql+mysqldb://u@localhost/db")  # never connects


def test_key_collations_are_binary_and_no_pad_where_the_server_has_one() -> None:
    assert mysql_key_collation(True, (10, 11, 19)) == "utf8mb4_nopad_bin"
    assert mysql_key_collation(False, (8, 4, 0)) == "utf8mb4_0900_bin"
    assert mysql_key_collation(False, (5, 7, 44)) == "utf8mb4_bin"  # PAD SPACE: see below


def test_a_text_key_column_is_a_no_pad_varchar_sized_from_the_source() -> None:
    def ddl(type_name: str) -> str:
        kind = kind_of(type_name, "postgresql")
        return str(sa_type(kind, "mysql", True).compile(dialect=mysql.dialect()))

    assert ddl("text") == "VARCHAR(255) COLLATE utf8mb4_nopad_bin"
    assert ddl("character varying(40)") == "VARCHAR(40) COLLATE utf8mb4_nopad_bin"
    assert ddl("varchar(5000)") == f"VARCHAR({MYSQL_KEY_MAX}) COLLATE utf8mb4_nopad_bin"
    assert kind_of("varbinary(16)") == kind_of("binary(16)")
    assert kind_of("varbinary(16)").length == 32 and kind_of("binary(16)").kind is Kind.TEXT


def replica(*texts: KeyText) -> ReplicaTable:
    info = TableInfo(T, (ColumnInfo("a", "text"), ColumnInfo("b", "text")), ("a", "b"))
    table = build_table(T, "docs", None, kinds_of(info), ("a", "b"), "mysql")
    return ReplicaTable(T, table, "docs_live", ("a", "b"), kinds_of(info), texts)


def test_a_key_longer_than_its_column_is_refused_naming_table_column_and_fix() -> None:
    both = replica(KeyText("a", 0, 10, "utf8mb4_nopad_bin"),
                   KeyText("b", 1, 3, "utf8mb4_nopad_bin"))
    check_keys(ENGINE, both, [("x" * 10, "abc"), ("", "")])
    with pytest.raises(FatalOutputError) as raised:
        check_keys(ENGINE, both, [("x", "abc"), ("y", "abcd")])  # the second column
    error = raised.value
    assert "replica table docs: key column b holds at most 3 characters" in error.message
    assert "has 4: 'abcd'" in error.message
    assert error.fix is not None
    assert f"ALTER TABLE docs MODIFY b VARCHAR({MYSQL_KEY_MAX}) CHARACTER SET utf8mb4 " \
           "COLLATE utf8mb4_nopad_bin NOT NULL" in error.fix
    with pytest.raises(FatalOutputError) as raised:
        check_keys(ENGINE, both, [("x" * (MYSQL_KEY_MAX + 1), "")])
    assert "PostgreSQL or SQLite" in (raised.value.fix or "")


def test_a_key_ending_in_a_space_is_refused_under_a_pad_space_collation() -> None:
    """MySQL before 8.0.17 has no NO PAD binary utf8mb4 collation: 'a ' would meet 'a'."""
    padded = replica(KeyText("a", 0, 10, "utf8mb4_bin", padded=True))
    check_keys(ENGINE, padded, [(" a", "b "), ("a", None)])
    with pytest.raises(FatalOutputError, match="PAD SPACE collation utf8mb4_bin"):
        check_keys(ENGINE, padded, [("a ", "")])
