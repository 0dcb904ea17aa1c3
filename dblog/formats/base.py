"""The format contract and the registry of formats by name.

A format turns events into bytes and knows nothing of where they go; a transport (an output)
carries the bytes and knows nothing of their shape. ``encode`` gives one record; ``encode_lines``
gives newline-framed records for a batch, which a format may encode faster than one by one;
``encode_records`` gives the keyed records of one event for a keyed transport (Kafka): an event
may become several records (debezium-json: a delete and its tombstone; a key change as a delete,
a tombstone and a create) or none (a format that skips transaction markers).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Protocol, runtime_checkable

from dblog.core.model import ChangeEvent, TableId, TableInfo
from dblog.errors import ConfigError
from dblog.spi.findings import Finding
from dblog.spi.source import LoggedImages

TableLookup = Callable[[TableId], TableInfo | None]
"""The metadata of a table (columns, types, key) where a format needs it; None if unknown."""


def no_tables(table: TableId) -> TableInfo | None:
    return None


@dataclass(frozen=True, slots=True)
class Record:
    """One keyed record: ``key`` None for a record without a key (a truncate); ``value`` None
    for a tombstone (a Kafka delete marker for log compaction)."""

    key: bytes | None
    value: bytes | None


class Format(Protocol):
    name: str

    def encode(self, event: ChangeEvent, table: TableInfo | None = None) -> bytes:
        """One event as one record (no framing)."""
        ...

    def encode_lines(self, events: Sequence[ChangeEvent], tables: TableLookup = no_tables
                     ) -> bytes:
        """Every event as one record followed by a newline, in order."""
        ...

    def encode_records(self, event: ChangeEvent, table: TableInfo | None = None
                       ) -> list[Record]:
        """The keyed records of one event, in the order a transport must send them."""
        ...


_BUILTIN: dict[str, str] = {"native": "dblog.formats.native:NativeFormat",
                            "debezium-json": "dblog.formats.debezium:DebeziumFormat",
                            "canal-json": "dblog.formats.canal:CanalFormat"}


def format_by_name(name: str, options: Mapping[str, Any] | None = None) -> Format:
    """A new encoder of the format ``name`` (built-in, or from the ``dblog.formats`` entry
    points); each caller gets its own instance, so encoders keep private caches. ``options``
    (the format's own settings, e.g. debezium-json's ``before_image``) are passed as keyword
    arguments; a format without options takes none."""
    target = _BUILTIN.get(name)
    kwargs = dict(options or {})
    if target is None:
        for ep in entry_points(group="dblog.formats"):
            if ep.name == name:
                factory: Callable[..., Format] = ep.load()
                return factory(**kwargs)
        known = sorted(set(_BUILTIN) | {ep.name for ep in entry_points(group="dblog.formats")})
        raise ConfigError(f"unknown format {name!r}", fix=f"use one of: {', '.join(known)}")
    module, _, attr = target.partition(":")
    cls: Callable[..., Format] = getattr(__import__(module, fromlist=[attr]), attr)
    return cls(**kwargs)


@runtime_checkable
class FormatWithRequirements(Protocol):
    """A format that needs more of the source than keys and new rows (a changelog format's
    consumers retract full old rows); ``dblog check`` asks it per captured table."""

    def requirements(self, info: TableInfo, logged: LoggedImages) -> list[Finding]: ...


@runtime_checkable
class CheckableFormat(Protocol):
    """A format with findings of its own options, whatever the tables (``dblog check``)."""

    def check(self) -> list[Finding]: ...


@runtime_checkable
class TombstonePolicy(Protocol):
    """A format that says whether its deletes may be followed by a tombstone (a transport
    without this asks nothing: native's may). canal-json's may not: its consumers do not
    expect null records; debezium-json's follow its ``tombstones`` option."""

    def emits_tombstones(self) -> bool: ...


@runtime_checkable
class FormattedOutput(Protocol):
    """An output (a transport) that encodes events with a format."""

    format: Format
