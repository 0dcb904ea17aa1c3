"""One table plan (:class:`dblog.replica.TablePlan`) as SQL statements, per dialect; what
:class:`dblog.replica.MemoryReplica` does on dicts, inside the flush's transaction.

The upsert of every change of a table plan is one batched statement (``executemany``) whose
rows are written only where no row exists or the stored guard is smaller:

* PostgreSQL and SQLite: ``INSERT ... ON CONFLICT (key) DO UPDATE SET ... WHERE
  (t._dblog_major, t._dblog_minor) < (excluded._dblog_major, excluded._dblog_minor)``;
* MySQL and MariaDB have no ``WHERE`` there: ``ON DUPLICATE KEY UPDATE c = CASE WHEN <newer>
  THEN VALUES(c) ELSE c END`` for every column, the guard columns last and the minor before
  the major, because MySQL evaluates assignments left to right and ``<newer>`` reads the
  guard columns (after the minor changed, ``(major, new minor) < (new major, new minor)`` is
  still true exactly when the major must change).

A tombstone is the same upsert with the key, NULL values and ``_dblog_deleted`` true.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from dblog.core.model import Key, Row
from dblog.errors import FatalOutputError
from dblog.replica import Guard, RowChange, TablePlan
from dblog.replica.reduce import decoded

from .sql_kinds import DELETED, GUARD_MAJOR, GUARD_MINOR, from_db, to_db
from .sql_schema import ReplicaTable


def upsert_statement(replica: ReplicaTable, dialect: str) -> sa.Insert:
    """The guarded upsert of ``replica`` for ``executemany`` (see the module docstring)."""
    table = replica.table
    data = [c for c in replica.kinds if c not in replica.key]
    stored = sa.tuple_(table.c[GUARD_MAJOR], table.c[GUARD_MINOR])
    if dialect in ("postgresql", "sqlite"):
        pg_or_lite = pg_insert(table) if dialect == "postgresql" else sqlite_insert(table)
        excluded = pg_or_lite.excluded
        newer = stored < sa.tuple_(excluded[GUARD_MAJOR], excluded[GUARD_MINOR])
        sets = {c: excluded[c] for c in (*data, DELETED, GUARD_MINOR, GUARD_MAJOR)}
        return pg_or_lite.on_conflict_do_update(index_elements=list(replica.key), set_=sets,
                                                where=newer)
    my = mysql_insert(table)
    new = my.inserted
    newer = stored < sa.tuple_(new[GUARD_MAJOR], new[GUARD_MINOR])
    updates = [(c, sa.case((newer, new[c]), else_=table.c[c]))
               for c in (*data, DELETED, GUARD_MINOR, GUARD_MAJOR)]
    return my.on_duplicate_key_update(updates)


def params(replica: ReplicaTable, change: RowChange, row: Row | None,
           dialect: str) -> dict[str, Any]:
    """The statement parameters of one change (``row``: its decoded after-image)."""
    kinds = replica.kinds
    values: dict[str, Any] = dict.fromkeys(kinds) if row is None else \
        {c: row.get(c) for c in kinds}
    # the key columns hold the event's key: a MySQL key under a case-insensitive collation is
    # normalised there (docs/sources/mysql.md), and rows must meet on it
    values.update(zip(replica.key, change.key, strict=True))
    out = {c: to_db(kinds[c], dialect, v) for c, v in values.items()}
    out[GUARD_MAJOR], out[GUARD_MINOR] = change.guard
    out[DELETED] = row is None
    return out


def unknown_columns(replica: ReplicaTable, rows: Iterable[Row | None]) -> dict[str, Any]:
    """Columns some row has that the replica table lacks, each with its first non-null value."""
    kinds = replica.kinds.keys()
    found: dict[str, Any] = {}
    for row in rows:
        if row is not None and not kinds >= row.keys():
            for column, value in row.items():
                if column not in kinds and found.get(column) is None:
                    found[column] = value
    return found


def truncate(conn: Connection, replica: ReplicaTable, barrier: Guard) -> None:
    """Delete every row (tombstones too) older than the truncate."""
    table = replica.table
    conn.execute(table.delete().where(
        sa.tuple_(table.c[GUARD_MAJOR], table.c[GUARD_MINOR]) < tuple(barrier)))


def purge(conn: Connection, replica: ReplicaTable, bound: Guard) -> int:
    """Delete the tombstones below ``bound``; how many went."""
    table = replica.table
    result = conn.execute(table.delete().where(
        table.c[DELETED], sa.tuple_(table.c[GUARD_MAJOR], table.c[GUARD_MINOR]) < tuple(bound)))
    return int(result.rowcount)


def apply_table(conn: Connection, replica: ReplicaTable, plan: TablePlan,
                rows: list[Row | None], dialect: str) -> None:
    """Execute one table plan; ``rows`` are its changes' decoded after-images, in order."""
    if plan.truncate is not None:
        truncate(conn, replica, plan.truncate)
    changes: Iterable[tuple[RowChange, Row | None]] = zip(plan.changes, rows, strict=True)
    if any(change.keep for change in plan.changes):
        changes = with_kept(conn, replica, list(changes), dialect)
    batch = [params(replica, change, row, dialect) for change, row in changes]
    if batch:
        conn.execute(upsert_statement(replica, dialect), batch)


def _stored(conn: Connection, replica: ReplicaTable, keys: set[Key]
            ) -> dict[Key, tuple[Guard, Row | None]]:
    """The stored rows of ``keys`` (guard, canonical row or None for a tombstone)."""
    table, kinds = replica.table, replica.kinds
    key_cols = [table.c[k] for k in replica.key]
    match = key_cols[0].in_([k[0] for k in keys]) if len(key_cols) == 1 else \
        sa.tuple_(*key_cols).in_(list(keys))
    out: dict[Key, tuple[Guard, Row | None]] = {}
    for record in conn.execute(sa.select(table).where(match)).mappings():
        key = tuple(from_db(kinds[k], record[k]) for k in replica.key)
        row = None if record[DELETED] else {c: from_db(kinds[c], record[c]) for c in kinds}
        out[key] = (Guard(record[GUARD_MAJOR], record[GUARD_MINOR]), row)
    return out


def with_kept(conn: Connection, replica: ReplicaTable,
              changes: list[tuple[RowChange, Row | None]], dialect: str
              ) -> list[tuple[RowChange, Row | None]]:
    """Changes with their ``keep`` columns filled from the rows stored before the plan; a
    change that the stored row's guard refuses is left out (as the upsert would)."""
    wanted = {c.key for c, _ in changes if c.keep}
    wanted |= {c.keep_from for c, _ in changes if c.keep and c.keep_from is not None}
    stored = _stored(conn, replica, wanted)
    out: list[tuple[RowChange, Row | None]] = []
    for change, row in changes:
        if not change.keep or row is None:
            out.append((change, row))
            continue
        own = stored.get(change.key)
        if own is not None and own[0] >= change.guard:
            continue
        source_key = change.key if change.keep_from is None else change.keep_from
        source = stored.get(source_key)
        if source is None or source[1] is None:
            raise FatalOutputError(
                f"{replica.source}: the change at seq {change.seq} keeps "
                f"{sorted(change.keep)} of key {source_key!r}, which the replica does not hold",
                fix="dump the table again (a dump row carries every column)")
        out.append((change, {**row, **{c: source[1].get(c) for c in change.keep}}))
    return out


def decoded_rows(plan: TablePlan) -> list[Row | None]:
    return [None if c.row is None else decoded(c.row) for c in plan.changes]
