"""The key columns of replica tables: which existing key columns a replica can use, and which
keys a MySQL/MariaDB key column can hold as the source's own.

A replica row is found by its key, and the apply core (:mod:`dblog.replica`) compares keys
exactly, as the source's events spell them. So a key column must make two keys one only when
the source does; otherwise an upsert overwrites another key's row, or meets its own tombstone
(docs/outputs/sql.md, "Type mapping"). What this decides, each with the fix in its refusal:

* **collation** (MySQL/MariaDB): a text key column must be a VARCHAR under a binary NO PAD
  collation (:data:`~dblog.outputs.sql_kinds.NOPAD_BINARY`). A ``_ci`` collation merges
  ``'a'`` and ``'A'``, a PAD SPACE one (``utf8mb4_bin``, which dblog created before) or CHAR
  ``'a'`` and ``'a '``: an existing such column is refused at start
  (:func:`existing_key_texts`). MySQL before 8.0.17 has no NO PAD utf8mb4 collation: its
  ``utf8mb4_bin`` keys are *padded* (:class:`KeyText`) and a key ending in a space is refused
  when written;
* **lengths** (MySQL/MariaDB): a key longer than its VARCHAR is refused before the flush
  writes anything (:func:`check_keys`): a strict server would refuse it without a word of
  the fix, a lenient one would cut it and two keys could meet;
* **exact keys**: an unconstrained ``numeric`` key (:func:`~dblog.outputs.sql_kinds.exact_key`)
  must be stored as text; an existing NUMERIC column for it makes ``1.5`` and ``1.50`` one key
  and is refused at start (:func:`refuse_inexact_key`).

Which type a key column gets when dblog creates it (the collation by server, the length from
the source type) is the type mapping's: :mod:`dblog.outputs.sql_kinds`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dblog.core.model import Key
from dblog.core.requestcheck import shown
from dblog.errors import FatalOutputError

from .sql_kinds import (
    MYSQL_KEY_MAX,
    NOPAD_BINARY,
    ColumnKind,
    exact_key,
    mysql_key_length,
    stored_as_text,
)

if TYPE_CHECKING:  # sql_schema imports this module
    from .sql_schema import ReplicaTable

DROP = "or drop the table (and its view) so that dblog creates it, then dump the source again"
"""The fix that always works for an existing replica table a replica cannot use."""


@dataclass(frozen=True)
class KeyText:
    """A text key column of a MySQL/MariaDB replica table and what it holds: at most
    ``length`` characters (a VARCHAR; longer keys would be cut, or refused by a strict
    server with no word of the fix) and, when ``padded`` (a PAD SPACE collation, only on
    MySQL before 8.0.17), no key ending in a space (it would meet the key without it)."""

    column: str
    at: int
    """Its index in the key."""
    length: int
    collation: str
    padded: bool = False


def _table(engine: Engine, replica: ReplicaTable) -> str:
    return engine.dialect.identifier_preparer.format_table(replica.table)


def created_key_texts(replica: ReplicaTable, dialect: str) -> tuple[KeyText, ...]:
    """The text key columns of a MySQL/MariaDB replica table this output created."""
    if dialect not in ("mysql", "mariadb"):
        return ()
    return tuple(KeyText(c, at, mysql_key_length(replica.kinds[c]), replica.key_collation,
                         replica.key_collation not in NOPAD_BINARY)
                 for at, c in enumerate(replica.key) if stored_as_text(replica.kinds[c], dialect))


_KEY_COLUMNS = sa.text(
    "SELECT COLUMN_NAME, DATA_TYPE, CHARACTER_MAXIMUM_LENGTH, COLLATION_NAME FROM "
    "information_schema.COLUMNS WHERE TABLE_SCHEMA = COALESCE(:schema, DATABASE()) AND "
    "TABLE_NAME = :name")


def existing_key_texts(engine: Engine, replica: ReplicaTable) -> tuple[KeyText, ...]:
    """The text key columns of an existing MySQL/MariaDB replica table, from the catalog.
    Refused with the fix when the collation merges keys the source keeps apart (a ``_ci`` or
    PAD SPACE one: dblog created ``utf8mb4_bin`` keys before) or the type is CHAR (it drops
    trailing spaces)."""
    table = replica.table
    with engine.connect() as conn:
        found = {str(r[0]): r[1:] for r in conn.execute(
            _KEY_COLUMNS, {"schema": table.schema, "name": table.name})}
    out = []
    for at, column in enumerate(replica.key):
        data_type, length, collation = found.get(column, (None, None, None))
        if collation is None:
            continue  # not a text column: numbers and temporal values compare exactly
        padded = collation == replica.key_collation == "utf8mb4_bin"  # MySQL < 8.0.17
        if str(data_type).lower() != "varchar" or (collation not in NOPAD_BINARY
                                                   and not padded):
            raise FatalOutputError(
                f"replica table {table.name}: key column {column} is "
                f"{str(data_type).upper()}({length}) COLLATE {collation}, under which keys the "
                "source keeps apart are one key (a PAD SPACE collation or CHAR: 'a' and 'a '; "
                "a _ci one: 'a' and 'A'), so their rows would overwrite each other",
                fix=f"{_widen(engine, replica, column, int(length or 0))}, then dump the table "
                    "again (rows the old collation merged are missing); " + DROP)
        out.append(KeyText(column, at, int(length), collation, padded))
    return tuple(out)


def _widen(engine: Engine, replica: ReplicaTable, column: str, length: int) -> str:
    quote = engine.dialect.identifier_preparer.quote
    return (f"ALTER TABLE {_table(engine, replica)} MODIFY {quote(column)} VARCHAR({length}) "
            f"CHARACTER SET utf8mb4 COLLATE {replica.key_collation} NOT NULL")


def check_keys(engine: Engine, replica: ReplicaTable, keys: Iterable[Key]) -> None:
    """Refuse, naming the table, the column and the fix, a key a MySQL/MariaDB text key
    column cannot hold as the source's own: longer than the column (a lenient server would
    cut it, and two keys could meet), or ending in a space under a PAD SPACE collation."""
    texts = replica.key_texts
    for key in keys:
        for text in texts:
            value = key[text.at]
            if not isinstance(value, str):
                continue
            if len(value) > text.length:
                raise FatalOutputError(
                    f"replica table {replica.table.name}: key column {text.column} holds at "
                    f"most {text.length} characters (VARCHAR({text.length})), but a key of "
                    f"source table {replica.source} has {len(value)}: {shown(value)}",
                    fix=_longer(engine, replica, text, len(value)))
            if text.padded and value.endswith(" "):
                raise FatalOutputError(
                    f"replica table {replica.table.name}: key column {text.column} has the "
                    f"PAD SPACE collation {text.collation}, under which the key {shown(value)} "
                    "of the source is the same key as without its trailing spaces",
                    fix="use a target with a NO PAD binary collation (MariaDB, MySQL 8.0.17+), "
                        "PostgreSQL or SQLite")


def _longer(engine: Engine, replica: ReplicaTable, text: KeyText, needed: int) -> str:
    if needed > MYSQL_KEY_MAX:
        return (f"a MySQL/MariaDB key holds at most {MYSQL_KEY_MAX} utf8mb4 characters "
                "(InnoDB's 3,072 bytes): replicate this table to a PostgreSQL or SQLite target")
    return (f"{_widen(engine, replica, text.column, MYSQL_KEY_MAX)} (at most {MYSQL_KEY_MAX}: "
            "InnoDB keys hold 3,072 bytes), then restart the pipeline; replica tables dblog "
            "creates take the length from the source column's type (varchar(n)), else 255")


def refuse_inexact_key(engine: Engine, replica: ReplicaTable, column: str, kind: ColumnKind,
                       found: sa.types.TypeEngine[Any]) -> None:
    """Refuse an existing key column of type ``found`` that is not text for a key that must
    be stored as its exact text (:func:`~dblog.outputs.sql_kinds.exact_key`)."""
    if column in replica.key and exact_key(kind) and not isinstance(found, sa.String):
        raise FatalOutputError(
            f"replica table {replica.table.name}: key column {column} is {found}, which makes "
            "one key of values the source's events keep apart (1.5 and 1.50 of an "
            "unconstrained numeric: PostgreSQL logs a change from one to the other as a key "
            "change), so such a change would lose the row",
            fix=_as_text(engine, replica, column))


def _as_text(engine: Engine, replica: ReplicaTable, column: str) -> str:
    """The fix for a key column that must hold the exact text of its values."""
    dialect, preparer = engine.dialect.name, engine.dialect.identifier_preparer
    table = _table(engine, replica)
    if dialect == "postgresql":
        view = preparer.format_table(sa.table(replica.view, schema=replica.table.schema))
        alter = (f"DROP VIEW {view}; ALTER TABLE {table} ALTER COLUMN "
                 f"{preparer.quote(column)} TYPE text (dblog creates the view again)")
    elif dialect in ("mysql", "mariadb"):
        alter = _widen(engine, replica, column, mysql_key_length(replica.kinds[column]))
    else:
        return "drop the table (and its view) so that dblog creates it, then dump the source again"
    return f"{alter}, then dump the table again (rows merged so far are missing); " + DROP
