"""The format contract and the registry of formats by name.

A format turns events into bytes and knows nothing of where they go; a transport (an output)
carries the bytes and knows nothing of their shape. ``encode`` gives one record; ``encode_lines``
gives newline-framed records for a batch, which a format may encode faster than one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import Protocol

from dblog.core.model import ChangeEvent, TableId, TableInfo
from dblog.errors import ConfigError

TableLookup = Callable[[TableId], TableInfo | None]
"""The metadata of a table (columns, types, key) where a format needs it; None if unknown."""


def no_tables(table: TableId) -> TableInfo | None:
    return None


class Format(Protocol):
    name: str

    def encode(self, event: ChangeEvent, table: TableInfo | None = None) -> bytes:
        """One event as one record (no framing)."""
        ...

    def encode_lines(self, events: Sequence[ChangeEvent], tables: TableLookup = no_tables
                     ) -> bytes:
        """Every event as one record followed by a newline, in order."""
        ...


_BUILTIN: dict[str, str] = {"native": "dblog.formats.native:NativeFormat"}


def format_by_name(name: str) -> Format:
    """A new encoder of the format ``name`` (built-in, or from the ``dblog.formats`` entry
    points); each caller gets its own instance, so encoders keep private caches."""
    target = _BUILTIN.get(name)
    if target is None:
        for ep in entry_points(group="dblog.formats"):
            if ep.name == name:
                factory: Callable[[], Format] = ep.load()
                return factory()
        known = sorted(set(_BUILTIN) | {ep.name for ep in entry_points(group="dblog.formats")})
        raise ConfigError(f"unknown format {name!r}", fix=f"use one of: {', '.join(known)}")
    module, _, attr = target.partition(":")
    cls: Callable[[], Format] = getattr(__import__(module, fromlist=[attr]), attr)
    return cls()
