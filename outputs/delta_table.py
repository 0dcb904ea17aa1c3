"""One Delta table per source table through ``deltalake`` (delta-rs, no JVM): its Arrow schema,
the guarded MERGE of a table plan, truncates, tombstone purges and the epoch fence.

The MERGE of a table plan (one per table per flush)::

    MERGE INTO t USING s
      ON t.k1 = s.k1 AND ... [AND t.k1 BETWEEN <min> AND <max>]
    WHEN MATCHED AND (s._dblog_major > t._dblog_major OR (s._dblog_major = t._dblog_major AND
                      s._dblog_minor > t._dblog_minor)) THEN UPDATE SET *
    WHEN NOT MATCHED THEN INSERT *

The range on the first key column (integer keys) lets delta-rs skip the files whose
statistics lie outside the batch's keys, so a batch of clustered keys rewrites few files.

Fencing (a deposed leader's commit is refused by the table): every commit carries the
application transaction ``dblog:<pipeline>`` with version ``epoch << 40 | seq``. Before a
commit the table is reloaded and refused when its transaction version holds a newer epoch. A
new leader *claims* every existing table of the pipeline when it opens, and a table made
since at its first use (before its greatest key is read): a metadata commit (``dblog.epoch``)
under its own version. A deposed leader's commit prepared on a snapshot
older than the claim conflicts with that metadata change (Delta's optimistic concurrency
refuses it); one prepared on a newer snapshot sees the newer epoch and is not attempted.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from dblog.core.model import Key, Row
from dblog.errors import FatalOutputError, LeadershipLost
from dblog.replica import Guard, RowChange, kept
from dblog.replica.kept import Changes

from .sql_kinds import (
    DELETED,
    GUARD_MAJOR,
    GUARD_MINOR,
    ColumnKind,
    Kind,
    from_db,
    stored_as_text,
    to_db,
)

EPOCH_SHIFT = 40
EPOCH_PROPERTY = "dblog.epoch"
KEY_PROPERTY = "dblog.key"


def arrow_type(kind: ColumnKind) -> pa.DataType:
    if stored_as_text(kind, "delta"):
        return pa.string()
    if kind.kind is Kind.INT:
        return pa.int64()
    if kind.kind is Kind.BIGUINT:
        return pa.decimal128(20, 0)
    if kind.kind is Kind.BOOL:
        return pa.bool_()
    if kind.kind is Kind.FLOAT:
        return pa.float64()
    assert kind.precision is not None
    return pa.decimal128(kind.precision, kind.scale or 0)


def arrow_schema(kinds: dict[str, ColumnKind]) -> pa.Schema:
    fields = [pa.field(c, arrow_type(k)) for c, k in kinds.items()]
    fields += [pa.field(GUARD_MAJOR, pa.int64(), nullable=False),
               pa.field(GUARD_MINOR, pa.int64(), nullable=False),
               pa.field(DELETED, pa.bool_(), nullable=False)]
    return pa.schema(fields)


def app_id(pipeline: str) -> str:
    return f"dblog:{pipeline}"


def commit_properties(pipeline: str, epoch: int, seq: int) -> CommitProperties:
    version = (epoch << EPOCH_SHIFT) | (max(seq, 0) & ((1 << EPOCH_SHIFT) - 1))
    return CommitProperties(app_transactions=[Transaction(app_id(pipeline), version)],
                            custom_metadata={"dblog.pipeline": pipeline,
                                             "dblog.epoch": str(epoch), "dblog.seq": str(seq)})


def check_epoch(table: DeltaTable, pipeline: str, epoch: int) -> None:
    """Reload ``table`` and refuse when a newer epoch of the pipeline committed to it."""
    table.update_incremental()
    version = table.transaction_version(app_id(pipeline))
    if version is not None and version >> EPOCH_SHIFT > epoch:
        raise LeadershipLost(
            f"Delta table {table.table_uri} refused the commit of pipeline {pipeline!r} at "
            f"epoch {epoch}: epoch {version >> EPOCH_SHIFT} committed there (this instance "
            "was deposed)")


def claim(table: DeltaTable, pipeline: str, epoch: int) -> None:
    """Fence older epochs out of ``table`` (see the module docstring)."""
    check_epoch(table, pipeline, epoch)
    table.alter.set_table_properties({EPOCH_PROPERTY: str(epoch)}, raise_if_not_exists=False,
                                     commit_properties=commit_properties(pipeline, epoch, 0))


def batch(kinds: dict[str, ColumnKind], key: Sequence[str],
          changes: Sequence[tuple[RowChange, Row | None]],
          target: pa.Schema | None = None) -> pa.Table:
    """The MERGE source: one Arrow row per change (a tombstone: key, nulls, deleted), built
    column by column. Fields the ``target`` table has keep its exact type and nullability:
    delta-rs 1.6 MERGE with schema evolution copies NULLs into unmatched rows of a column
    whose source field differs from the table's only in nullability."""
    schema = arrow_schema(kinds)
    if target is not None:
        schema = pa.schema([target.field(f.name) if f.name in target.names else f
                            for f in schema])
    rows = [row for _, row in changes]
    arrays = []
    for column, kind in kinds.items():
        if column in key:  # the event's key (as sql_write: normalised MySQL keys)
            index = key.index(column)
            values = [change.key[index] for change, _ in changes]
        else:
            values = [None if row is None else row.get(column) for row in rows]
        arrays.append(column_array(kind, values, schema.field(column).type))
    arrays += [pa.array([c.guard.major for c, _ in changes], pa.int64()),
               pa.array([c.guard.minor for c, _ in changes], pa.int64()),
               pa.array([row is None for row in rows], pa.bool_())]
    return pa.Table.from_arrays(arrays, schema=schema)


def column_array(kind: ColumnKind, values: list[Any], arrow: pa.DataType) -> pa.Array:
    """Canonical values as an Arrow array of the column's type; decimals (canonical text) and
    big unsigned integers are cast by Arrow, not converted value by value."""
    if kind.kind is Kind.DECIMAL and pa.types.is_decimal(arrow):
        return pa.array(values, pa.string()).cast(arrow)
    if kind.kind is Kind.BIGUINT:
        return pa.array(values, pa.uint64()).cast(arrow)
    if kind.kind is Kind.JSON:
        values = [to_db(kind, "delta", v) for v in values]
    return pa.array(values, arrow)


def _quote(column: str) -> str:
    return "`" + column.replace("`", "``") + "`"


def merge_predicate(kinds: dict[str, ColumnKind], key: Sequence[str], source: pa.Table) -> str:
    """The key equality, with the batch's range of an integer first key column."""
    terms = [f"t.{_quote(k)} = s.{_quote(k)}" for k in key]
    first = key[0]
    if kinds[first].kind is Kind.INT and source.num_rows:
        low, high = pc.min_max(source.column(first)).values()
        terms.append(f"t.{_quote(first)} >= {int(low.as_py())} "
                     f"AND t.{_quote(first)} <= {int(high.as_py())}")
    return " AND ".join(terms)


NEWER = (f"s.{GUARD_MAJOR} > t.{GUARD_MAJOR} OR (s.{GUARD_MAJOR} = t.{GUARD_MAJOR} "
         f"AND s.{GUARD_MINOR} > t.{GUARD_MINOR})")


def merge(table: DeltaTable, source: pa.Table, predicate: str,
          props: CommitProperties) -> dict[str, Any]:
    """The guarded MERGE; new source columns are added to the table (schema evolution)."""
    merger = table.merge(source, predicate, source_alias="s", target_alias="t",
                         merge_schema=True, commit_properties=props)
    metrics: dict[str, Any] = (merger.when_matched_update_all(predicate=NEWER)
                               .when_not_matched_insert_all().execute())
    return metrics


def integer_key(kinds: dict[str, ColumnKind], key: Sequence[str]) -> str | None:
    """The key column when the key is one integer column (the only keys with a greatest
    stored value to append above), else None."""
    return key[0] if len(key) == 1 and kinds[key[0]].kind is Kind.INT else None


def above(source: pa.Table, column: str, stored: int | None) -> bool:
    """Whether every ``column`` value of ``source`` lies above ``stored`` (None: an empty
    table): then no stored row can match, and the MERGE would insert every row, which an
    append does without joining (a dump into an empty or growing table)."""
    if not source.num_rows:
        return False
    low = pc.min(source.column(column)).as_py()
    return stored is None or (low is not None and low > stored)


def beyond_stored_keys(table: DeltaTable, kinds: dict[str, ColumnKind], key: Sequence[str],
                       source: pa.Table) -> bool:
    """:func:`above` the table's greatest stored key, by the files' statistics. False when a
    file has no statistics for the key."""
    column = integer_key(kinds, key)
    if column is None:
        return False
    actions = pa.table(table.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return above(source, column, None)
    name = f"max.{column}"
    if name not in actions.column_names or actions.column(name).null_count:
        return False
    return above(source, column, pc.max(actions.column(name)).as_py())


def append(table: DeltaTable, source: pa.Table, props: CommitProperties) -> dict[str, Any]:
    """Rows no stored row matches (:func:`beyond_stored_keys`), appended."""
    write_deltalake(table, source, mode="append", schema_mode="merge",
                    commit_properties=props)
    return {"num_target_rows_inserted": source.num_rows, "appended": True}


def guard_below(bound: Guard) -> str:
    return (f"{GUARD_MAJOR} < {bound.major} OR ({GUARD_MAJOR} = {bound.major} AND "
            f"{GUARD_MINOR} < {bound.minor})")


def stored_rows(table: DeltaTable, kinds: dict[str, ColumnKind], key: Sequence[str],
                keys: set[Key]) -> dict[Key, tuple[Guard, Row | None]]:
    """The stored rows of ``keys`` (filtered on the first key column, then matched)."""
    first = [k[0] for k in keys]
    wanted = table.to_pyarrow_dataset().to_table(
        filter=pc.field(key[0]).isin(pa.array([to_db(kinds[key[0]], "delta", v) for v in first],
                                              arrow_type(kinds[key[0]]))))
    out: dict[Key, tuple[Guard, Row | None]] = {}
    for record in wanted.to_pylist():
        row = {c: from_db(k, record.get(c)) for c, k in kinds.items()}
        found = tuple(row[k] for k in key)
        if found in keys:
            guard = Guard(record[GUARD_MAJOR], record[GUARD_MINOR])
            out[found] = (guard, None if record[DELETED] else row)
    return out


def live_rows(table: DeltaTable, kinds: dict[str, ColumnKind], key: Sequence[str]
              ) -> dict[Key, Row]:
    """The table as readers see it: ``_dblog_deleted = false`` (the documented filter)."""
    data = table.to_pyarrow_dataset().to_table(filter=pc.field(DELETED) == pa.scalar(False))
    out: dict[Key, Row] = {}
    for record in data.to_pylist():
        row = {c: from_db(k, record.get(c)) for c, k in kinds.items()}
        out[tuple(row[k] for k in key)] = row
    return out


def with_kept(table: DeltaTable, kinds: dict[str, ColumnKind], key: Sequence[str],
              changes: Changes, left_out: kept.LeftOut) -> Changes:
    """Fill ``keep`` columns from the stored rows (:func:`dblog.replica.kept.with_kept`)."""
    return kept.with_kept(changes, lambda keys: stored_rows(table, kinds, key, keys), left_out)


def check_table(table: DeltaTable, kinds: dict[str, ColumnKind], key: Sequence[str]) -> None:
    """Refuse an existing Delta table a replica cannot use, naming the fix."""
    where = table.table_uri
    fix = "delete the table's folder so that dblog creates it, then dump the source again"
    stored_key = table.metadata().configuration.get(KEY_PROPERTY)
    if stored_key is None:
        raise FatalOutputError(f"Delta table {where} exists but is not a dblog replica (no "
                               f"{KEY_PROPERTY} property)", fix=fix + ", or set table_path")
    if list(orjson.loads(stored_key)) != list(key):
        raise FatalOutputError(f"Delta table {where} replicates key {stored_key}, the source "
                               f"has {list(key)}", fix=fix)
    schema = pa.schema(table.schema().to_arrow())
    missing = [c for c in (GUARD_MAJOR, GUARD_MINOR, DELETED) if c not in schema.names]
    if missing:
        raise FatalOutputError(f"Delta table {where} lacks {missing}", fix=fix)
    for column, kind in kinds.items():
        if column in schema.names and schema.field(column).type != arrow_type(kind):
            raise FatalOutputError(
                f"Delta table {where}: column {column} is {schema.field(column).type}, the "
                f"source's {kind.kind.value} values need {arrow_type(kind)}", fix=fix)


_PATH_ERRORS = (errno.ENOENT, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR,
                errno.EISDIR, errno.EEXIST)


def path_fix(code: int | None) -> str | None:
    """The fix of a Delta output whose folder cannot be created or written (by the failed file
    operation's error code); None for any other failure."""
    if code not in _PATH_ERRORS:
        return None
    return ("set outputs[].path of the delta output to a folder that the user running dblog "
            "can create and write (missing folders are created)")
