"""Dumps and their progress: pure values and transitions, serialisable into the state.

A dump covers a list of tables (each read in primary-key chunks up to the maximum key captured
when the table's dump starts), a key range of one table (chunks from the range's first key,
included, up to its last key, included, or the maximum key when the range is open there), or a
list of primary keys of one table. Progress advances only when a chunk's window has closed and
its rows were emitted.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any

from dblog.core.model import Key, TableId, TableInfo
from dblog.core.requestcheck import check_request, shown
from dblog.errors import DblogError, DumpRequestError

if TYPE_CHECKING:  # the contract is only named in hints: the core imports no I/O layer
    from dblog.spi import ChunkReader


class DumpState(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"


ACTIVE_STATES = frozenset({DumpState.QUEUED, DumpState.RUNNING})
KEEP_FINISHED = 50
"""Finished (done, cancelled, failed) dumps kept in the state for status queries."""


@dataclass(frozen=True, slots=True)
class TableProgress:
    table: TableId
    started: bool = False
    done: bool = False
    last_key: Key | None = None
    upper_key: Key | None = None
    chunks: int = 0
    rows: int = 0
    estimated_rows: int = 0


@dataclass(frozen=True, slots=True)
class KeyRange:
    """The keys from ``low`` to ``high`` of a range dump, both included (None: open end)."""

    low: Key | None = None
    high: Key | None = None


@dataclass(frozen=True, slots=True)
class Dump:
    id: str
    tables: tuple[TableProgress, ...]
    keys: tuple[Key, ...] | None = None
    key_index: int = 0
    state: DumpState = DumpState.QUEUED
    error: str | None = None
    internal: bool = False
    key_range: KeyRange | None = None
    """Set for a dump of a key range of its one table."""
    asked: str | None = None
    """The request as given under a ``dump_id`` (dumprequests.asked): a retry must match."""

    @property
    def chunks(self) -> int:
        return sum(t.chunks for t in self.tables)

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables)


@dataclass(frozen=True, slots=True)
class ChunkPlan:
    """What the next chunk of a dump reads: a key range, or an explicit key list."""

    dump_id: str
    table: TableId
    after: Key | None = None
    upper: Key | None = None
    keys: tuple[Key, ...] | None = None
    needs_start: bool = False
    inclusive: bool = False
    """``after`` is included (the first chunk of a key range): ``key >= after``."""


def new_dump_id() -> str:
    return uuid.uuid4().hex[:12]


def tables_dump(tables: Sequence[TableId], dump_id: str | None = None) -> Dump:
    return Dump(id=dump_id or new_dump_id(), tables=tuple(TableProgress(t) for t in tables))


def keys_dump(
    table: TableId, keys: Sequence[Key], dump_id: str | None = None, internal: bool = False
) -> Dump:
    return Dump(
        id=dump_id or new_dump_id(),
        tables=(TableProgress(table, started=True),),
        keys=tuple(keys),
        internal=internal,
    )


def validated_dump(
    chunks: ChunkReader, table_info: Callable[[TableId], TableInfo],
    tables: object, table: object, keys: object,
    on_skip: Callable[[object, DblogError], None] | None = None,
    parse_keys: Callable[[TableInfo, Sequence[Sequence[object]]], Sequence[Key]] | None = None,
) -> Dump:
    """A dump for a request, checked completely before anything is stored: its shape
    (:func:`~dblog.core.requestcheck.check_request`), then against the source: the tables
    exist, are captured and have keys; each key has the key's arity and its values parse as the
    key columns' types. Anything wrong is a DumpRequestError; errors that are not dblog's own
    (a connector's bug) are wrapped into one, so the request fails alone.

    ``tables=None``: every captured table that can be dumped; the others are passed to
    ``on_skip`` (a table without a key, for example). ``parse_keys`` parses many keys at once
    (a :class:`~dblog.spi.KeyListParser`'s, one round trip); default: ``parse_key`` each."""
    request = check_request(tables, table, keys)
    try:
        if request.keys is not None:
            assert request.table is not None
            info = keyed_info(table_info, request.table)
            return keys_dump(info.table, parsed_keys(chunks, info, request.keys, parse_keys))
        if request.tables is not None:
            for name in request.tables:
                keyed_info(table_info, name)
            return tables_dump(request.tables)
        return tables_dump(_dumpable(chunks.list_tables(), table_info, on_skip))
    except DblogError:
        raise
    except Exception as exc:
        raise DumpRequestError(f"the request could not be checked against the source: "
                               f"{type(exc).__name__}: {exc}") from exc


def parsed_keys(
    chunks: ChunkReader, info: TableInfo, keys: Sequence[Sequence[object]],
    parse_keys: Callable[[TableInfo, Sequence[Sequence[object]]], Sequence[Key]] | None,
) -> list[Key]:
    for values in keys:
        if len(values) != len(info.key_columns):
            raise DumpRequestError(
                f"a key of {info.table} has {len(info.key_columns)} value(s) "
                f"({', '.join(info.key_columns)}), got {shown(list(values))}")
    if parse_keys is not None:
        return list(parse_keys(info, keys))
    return [chunks.parse_key(info, k) for k in keys]


def keyed_info(table_info: Callable[[TableId], TableInfo], table: TableId) -> TableInfo:
    """``table``'s metadata if it can be dumped: chunks are read in key order, so a table
    without a key cannot (whatever its reader would do with an empty key)."""
    info = table_info(table)
    if not info.key_columns:
        raise DumpRequestError(
            f"table {table} has no key: it cannot be dumped",
            fix="give it a primary key, or name unique non-null columns in source.key_columns")
    return info


def _dumpable(names: Sequence[TableId], table_info: Callable[[TableId], TableInfo],
              on_skip: Callable[[object, DblogError], None] | None) -> list[TableId]:
    dumpable = []
    for name in names:
        try:
            keyed_info(table_info, name)
        except DumpRequestError as exc:
            if on_skip is not None:
                on_skip(name, exc)
            continue
        dumpable.append(name)
    if names and not dumpable:
        raise DumpRequestError("none of the captured tables can be dumped (see the log)")
    return dumpable


def parse_key(info: TableInfo, values: Sequence[object],
              parse: Callable[[str, object], object]) -> Key:
    """A key given by a user, in canonical form: one value per key column, each through
    ``parse(column name, value)``; DumpRequestError on a wrong count or a malformed value."""
    if isinstance(values, (str, bytes)) or len(values) != len(info.key_columns):
        raise DumpRequestError(
            f"a key of {info.table} has {len(info.key_columns)} value(s) "
            f"({', '.join(info.key_columns)}), got {shown(values)}")
    try:
        return tuple(parse(name, value)
                     for name, value in zip(info.key_columns, values, strict=True))
    except DblogError:
        raise
    except Exception as exc:  # whatever a converter raises: the request fails alone
        raise DumpRequestError(f"malformed key {shown(values)} for {info.table}: "
                               f"{exc}") from exc


def next_chunk(dump: Dump, chunk_size: int) -> ChunkPlan | None:
    """The next chunk to read, or None when the dump has nothing left."""
    if dump.state not in ACTIVE_STATES:
        return None
    if dump.keys is not None:
        if dump.key_index >= len(dump.keys):
            return None
        batch = dump.keys[dump.key_index : dump.key_index + chunk_size]
        return ChunkPlan(dump.id, dump.tables[0].table, keys=batch)
    for progress in dump.tables:
        if progress.done:
            continue
        if not progress.started:
            return ChunkPlan(dump.id, progress.table, needs_start=True)
        if progress.last_key is None and dump.key_range is not None \
                and dump.key_range.low is not None:  # a range's first chunk: from its low key
            return ChunkPlan(dump.id, progress.table, after=dump.key_range.low,
                             upper=progress.upper_key, inclusive=True)
        return ChunkPlan(dump.id, progress.table, after=progress.last_key, upper=progress.upper_key)
    return None


def _replace_table(dump: Dump, progress: TableProgress) -> Dump:
    tables = tuple(progress if t.table == progress.table else t for t in dump.tables)
    return replace(dump, tables=tables, state=DumpState.RUNNING)


def start_table(dump: Dump, table: TableId, upper: Key | None, estimated_rows: int) -> Dump:
    """Record the table's upper bound (max key now); an empty table is done at once. A range
    dump with a last key reads up to that key instead (the database compares, in the chunk
    SELECT's ``<=``); its row count is unknown (the table's estimate would be no guide)."""
    progress = next(t for t in dump.tables if t.table == table)
    if dump.key_range is not None:
        estimated_rows = 0
        if upper is not None and dump.key_range.high is not None:
            upper = dump.key_range.high
    started = replace(progress, started=True, upper_key=upper, done=upper is None,
                      estimated_rows=estimated_rows)
    return _finish_if_complete(_replace_table(dump, started))


def complete_chunk(
    dump: Dump, plan: ChunkPlan, last_key: Key | None, selected: int, emitted: int, limit: int
) -> Dump:
    """Advance past a chunk whose window closed. The next chunk starts after the last key the
    SELECT returned, whether or not that row survived the window."""
    if plan.keys is not None:
        progress = replace(dump.tables[0], chunks=dump.tables[0].chunks + 1,
                           rows=dump.tables[0].rows + emitted)
        dump = replace(_replace_table(dump, progress), key_index=dump.key_index + len(plan.keys))
        return _finish_if_complete(dump)
    progress = next(t for t in dump.tables if t.table == plan.table)
    exhausted = _exhausted(selected, limit, last_key, progress.upper_key)
    progress = replace(
        progress,
        last_key=last_key if last_key is not None else progress.last_key,
        chunks=progress.chunks + 1,
        rows=progress.rows + emitted,
        done=exhausted,
    )
    return _finish_if_complete(_replace_table(dump, progress))


def _exhausted(selected: int, limit: int, last_key: Key | None, upper: Key | None) -> bool:
    return selected < limit or last_key is None or last_key == upper


def following_chunk(plan: ChunkPlan, last_key: Key | None, selected: int,
                    limit: int) -> ChunkPlan | None:
    """The plain chunk after ``plan`` once its SELECT returned ``selected`` rows ending at
    ``last_key`` (what :func:`complete_chunk` then :func:`next_chunk` give for it), or None when
    the table ends there or the next step is not a plain chunk of the same table."""
    if plan.keys is not None or plan.needs_start \
            or _exhausted(selected, limit, last_key, plan.upper):
        return None
    return ChunkPlan(plan.dump_id, plan.table, after=last_key, upper=plan.upper)


def _finish_if_complete(dump: Dump) -> Dump:
    if dump.keys is not None:
        finished = dump.key_index >= len(dump.keys)
    else:
        finished = all(t.done for t in dump.tables)
    return replace(dump, state=DumpState.DONE) if finished else dump


def set_state(dump: Dump, state: DumpState, error: str | None = None) -> Dump:
    return replace(dump, state=state, error=error)


# -- serialisation -------------------------------------------------------------------------


def _key_out(key: Key | None) -> list[Any] | None:
    return None if key is None else list(key)


def _key_in(raw: Any) -> Key | None:
    return None if raw is None else tuple(raw)


def dump_to_json(dump: Dump) -> dict[str, Any]:
    return {
        "id": dump.id,
        "state": dump.state.value,
        "error": dump.error,
        "internal": dump.internal,
        "key_index": dump.key_index,
        "keys": None if dump.keys is None else [list(k) for k in dump.keys],
        "range": None if dump.key_range is None else {
            "from": _key_out(dump.key_range.low), "to": _key_out(dump.key_range.high)},
        "tables": [
            {
                "table": [t.table.schema, t.table.name], "started": t.started, "done": t.done,
                "last_key": _key_out(t.last_key), "upper_key": _key_out(t.upper_key),
                "chunks": t.chunks, "rows": t.rows, "estimated_rows": t.estimated_rows,
            }
            for t in dump.tables
        ],
        **({} if dump.asked is None else {"asked": dump.asked}),
    }


def _count(value: Any) -> int:
    """A stored count (TypeError for anything else: the state is damaged)."""
    if type(value) is not int or value < 0:
        raise TypeError(f"{value!r} is not a count")
    return value


def _table_in(raw: Any) -> TableId:
    return TableId.parse(raw) if isinstance(raw, str) else TableId(raw[0], raw[1])


def dump_from_json(raw: dict[str, Any]) -> Dump:
    tables = tuple(
        TableProgress(
            table=_table_in(t["table"]), started=t["started"], done=t["done"],
            last_key=_key_in(t["last_key"]), upper_key=_key_in(t["upper_key"]),
            chunks=_count(t["chunks"]), rows=_count(t["rows"]),
            estimated_rows=_count(t.get("estimated_rows", 0)),
        )
        for t in raw["tables"]
    )
    keys = None if raw["keys"] is None else tuple(tuple(k) for k in raw["keys"])
    ranged = raw.get("range")  # absent in states written before range dumps
    key_range = None if ranged is None else KeyRange(_key_in(ranged["from"]),
                                                     _key_in(ranged["to"]))
    if not isinstance(raw["id"], str):
        raise TypeError(f"dump id {raw['id']!r} is not a string")
    return Dump(id=raw["id"], tables=tables, keys=keys, key_range=key_range,
                key_index=_count(raw["key_index"]),
                state=DumpState(raw["state"]), error=raw.get("error"),
                internal=raw.get("internal", False), asked=_asked_in(raw.get("asked")))


def _asked_in(raw: Any) -> str | None:
    if raw is not None and not isinstance(raw, str):
        raise TypeError(f"dump request {raw!r} is not a string")
    return raw


@dataclass(frozen=True, slots=True)
class DumpQueue:
    """All dumps in request order; the first active one runs."""

    dumps: tuple[Dump, ...] = field(default_factory=tuple)

    def active(self) -> Dump | None:
        return next((d for d in self.dumps if d.state in ACTIVE_STATES), None)

    def get(self, dump_id: str) -> Dump | None:
        return next((d for d in self.dumps if d.id == dump_id), None)

    def add(self, dump: Dump, front: bool = False) -> DumpQueue:
        """Queue ``dump``; finished dumps beyond the newest ``KEEP_FINISHED`` are forgotten, so
        the state does not grow with every dump ever run."""
        dumps = (dump, *self.dumps) if front else (*self.dumps, dump)
        finished = [d for d in dumps if d.state not in ACTIVE_STATES
                    and d.state is not DumpState.PAUSED]
        if len(finished) > KEEP_FINISHED:
            drop = {d.id for d in finished[: len(finished) - KEEP_FINISHED]}
            dumps = tuple(d for d in dumps if d.id not in drop)
        return DumpQueue(dumps)

    def put(self, dump: Dump) -> DumpQueue:
        return DumpQueue(tuple(dump if d.id == dump.id else d for d in self.dumps))
