"""User-given keys, checked and parsed by the server: each value is cast to its key column's
type, as the chunk queries will cast it, so a value the column cannot hold (out of range, bad
syntax, a NUL character) is refused when the request arrives, never when the dump runs.

All keys of a request go in one statement per key column (the values as one text array), so
a request of thousands of keys costs a few round trips on the engine thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from dblog.core.model import Key, TableInfo
from dblog.core.requestcheck import shown
from dblog.errors import DumpRequestError

from .errors import classify
from .types import converter_for

_CAST = "SELECT concat(v::{type}) FROM unnest(%s::text[]) WITH ORDINALITY AS u(v, i) ORDER BY i"


def _text(value: object) -> str:
    """A key value as the text PostgreSQL parses (booleans as true/false)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        text = str(value)
        if "\x00" in text:
            raise DumpRequestError(f"key value {shown(value)} contains a NUL character, which "
                                   "PostgreSQL text cannot hold")
        return text
    raise DumpRequestError(f"a key value must be a string, number or boolean, got "
                           f"{type(value).__name__} {shown(value)}")


def _column(conn: psycopg.Connection[Any], info: TableInfo, name: str, type_name: str,
            values: list[str]) -> list[Any]:
    """The values of one key column in canonical form, cast by the server."""
    query = sql.SQL(_CAST).format(type=sql.SQL(type_name))
    try:
        rows = conn.execute(query, (values,)).fetchall()
    except (psycopg.DataError, psycopg.errors.IntegrityError) as exc:
        detail = str(exc).strip().splitlines()[0]
        raise DumpRequestError(f"a key value for column {name} ({type_name}) of {info.table} "
                               f"is refused by the server: {detail}") from exc
    except psycopg.Error as exc:
        raise classify(exc, f"checking keys of {info.table}") from exc
    except (UnicodeError, ValueError) as exc:  # psycopg could not even send it
        raise DumpRequestError(f"a key value for column {name} of {info.table} cannot be "
                               f"sent: {exc}") from exc
    convert = converter_for(type_name)
    return [convert(row[0]) for row in rows]


def parse_keys(conn: psycopg.Connection[Any], info: TableInfo,
               keys: Sequence[Sequence[object]]) -> list[Key]:
    """``keys`` (each of the key's arity) in canonical form; DumpRequestError naming the
    first value the server refuses."""
    types = {c.name: c.type_name for c in info.columns}
    for key in keys:
        if isinstance(key, (str, bytes)) or len(key) != len(info.key_columns):
            raise DumpRequestError(f"a key of {info.table} has {len(info.key_columns)} "
                                   f"value(s) ({', '.join(info.key_columns)}), got {shown(key)}")
    columns = [_column(conn, info, name, types[name], [_text(key[i]) for key in keys])
               for i, name in enumerate(info.key_columns)]
    return [tuple(column[row] for column in columns) for row in range(len(keys))]
