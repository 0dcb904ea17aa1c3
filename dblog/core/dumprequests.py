"""Dumps built from requests that need more than :func:`dblog.core.dumps.validated_dump`: a
key range of one table, and the dumps of ``initial_dumps`` at start."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from dblog.core.dumps import Dump, KeyRange, TableProgress, keyed_info, new_dump_id, parsed_keys
from dblog.core.model import Key, TableId, TableInfo
from dblog.core.requestcheck import check_range
from dblog.errors import ConfigError, DblogError, DumpRequestError

if TYPE_CHECKING:  # the contract is only named in hints: the core imports no I/O layer
    from dblog.spi import ChunkReader

__all__ = ["asked", "initial_dumps", "range_dump", "validated_range_dump"]


def asked(tables: Sequence[object] | None = None, table: object = None,
          keys: Sequence[Sequence[object]] | None = None, *, ranged: bool = False,
          key_from: Sequence[object] | None = None, key_to: Sequence[object] | None = None
          ) -> str:
    """What a dump request asks for, without its id, as canonical JSON text: the request as
    given (not as checked, which depends on the tables captured at the time), so a retry
    under one ``dump_id`` is recognised by sending the same, and anything else is not."""
    shape: dict[str, object]
    try:
        shape = {"tables": None if tables is None else [_name(t) for t in tables],
                 "table": None if table is None else _name(table),
                 "keys": None if keys is None else [list(k) for k in keys]}
        if ranged:
            shape["range"] = [None if key_from is None else list(key_from),
                              None if key_to is None else list(key_to)]
    except TypeError:  # a request of the wrong shape: its check refuses it with the reason
        shape = {"malformed": [tables, table, keys, ranged, key_from, key_to]}
    return json.dumps(shape, default=str, separators=(",", ":"))  # any int, unlike orjson


def _name(table: object) -> object:
    """A table as ``schema.table`` (``t`` and ``public.t`` name one table)."""
    return str(TableId.coerce(table)) if isinstance(table, (str, TableId)) else table


def range_dump(table: TableId, key_range: KeyRange, dump_id: str | None = None) -> Dump:
    """A dump of the keys of ``table`` in ``key_range`` (both ends included)."""
    return Dump(id=dump_id or new_dump_id(), tables=(TableProgress(table),),
                key_range=key_range)


def validated_range_dump(
    chunks: ChunkReader, table_info: Callable[[TableId], TableInfo],
    table: object, key_from: object, key_to: object,
    parse_keys: Callable[[TableInfo, Sequence[Sequence[object]]], Sequence[Key]] | None = None,
) -> Dump:
    """A range dump for a request, checked completely before anything is stored: its shape
    (:func:`~dblog.core.requestcheck.check_range`), then against the source like the keys of a
    key dump: the table exists, is captured and has a key; each end has the key's arity and
    its values parse as the key columns' types. DumpRequestError otherwise."""
    request = check_range(table, key_from, key_to)
    try:
        info = keyed_info(table_info, request.table)
        ends = [end for end in (request.key_from, request.key_to) if end is not None]
        parsed = iter(parsed_keys(chunks, info, ends, parse_keys) if ends else [])
        low = next(parsed) if request.key_from is not None else None
        high = next(parsed) if request.key_to is not None else None
        return range_dump(info.table, KeyRange(low, high))
    except DblogError:
        raise
    except Exception as exc:
        raise DumpRequestError(f"the request could not be checked against the source: "
                               f"{type(exc).__name__}: {exc}") from exc


def initial_dumps(
    validate: Callable[[Sequence[str] | None], Dump],
    requests: Sequence[Sequence[str] | None], skip_unavailable: bool,
    on_skip: Callable[[object, DblogError], None],
) -> list[Dump]:
    """The dumps of ``initial_dumps``, each checked before anything runs or is stored: a
    table that does not exist or cannot be dumped is a ConfigError (the start is refused),
    or, with ``skip_unavailable``, left out with ``on_skip`` (a warning per table)."""
    dumps = []
    for index, tables in enumerate(requests):
        try:
            dumps.append(validate(tables))
        except DumpRequestError as exc:
            if not skip_unavailable or tables is None:
                raise ConfigError(
                    f"initial_dumps[{index}]: {exc.message}",
                    fix="correct the table names (and source.tables), or set "
                        "engine.initial_dumps_skip_unavailable: true to leave such tables "
                        "out with a warning") from exc
            kept = [t for t in tables if _available(validate, t, on_skip)]
            if kept:
                dumps.append(validate(kept))
    return dumps


def _available(validate: Callable[[Sequence[str] | None], Dump], table: str,
               on_skip: Callable[[object, DblogError], None]) -> bool:
    try:
        validate([table])
    except DumpRequestError as exc:
        on_skip(table, exc)
        return False
    return True
