"""Typed, ordered source positions.

A position is where the log reader can resume: everything up to and including it has been
handed out. Positions of one source kind are totally ordered; they serialise to a string
with a kind prefix so the state store can hold any of them.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from dblog.errors import StateError

if TYPE_CHECKING:  # typing.Self is 3.11+; dblog supports 3.10
    from typing import Self


@runtime_checkable
class Position(Protocol):
    """Positions of one kind are ordered (``<``); the order across kinds is undefined."""

    kind: ClassVar[str]

    def encode(self) -> str:
        """The stable string form, ``decode_position`` reverses it."""
        ...

    # the order, declared so that comparing two positions type-checks (tests wait for a
    # committed position to reach a target); only positions of one kind compare meaningfully
    def __lt__(self, other: Self, /) -> bool: ...

    def __le__(self, other: Self, /) -> bool: ...

    def __gt__(self, other: Self, /) -> bool: ...

    def __ge__(self, other: Self, /) -> bool: ...


class Ordered:
    """A base for partially ordered positions: comparison through ``_cmp`` (-1, 0, 1, or None
    when incomparable)."""

    __slots__ = ()

    def _cmp(self, other: object) -> int | None:
        raise NotImplementedError

    def __lt__(self, other: object) -> bool:
        return self._cmp(other) == -1

    def __le__(self, other: object) -> bool:
        return self._cmp(other) in (-1, 0)

    def __gt__(self, other: object) -> bool:
        return self._cmp(other) == 1

    def __ge__(self, other: object) -> bool:
        return self._cmp(other) in (1, 0)


def compare_maps(mine: dict[Any, int], theirs: dict[Any, int]) -> int | None:
    """Pointwise order of two counters (missing entries count as 0); None when they cross."""
    below = above = False
    for name in mine.keys() | theirs.keys():
        a, b = mine.get(name, 0), theirs.get(name, 0)
        below, above = below or a < b, above or a > b
    if below and above:
        return None
    return -1 if below else 1 if above else 0


_PARSERS: dict[str, Callable[[str], Position]] = {}


def register_position(kind: str, parse: Callable[[str], Position]) -> None:
    """Make positions of ``kind`` decodable from the state store. Each connector registers its
    own position types when its positions module is imported; a third-party connector does the
    same (its module is imported before any state is loaded, when the connector is built)."""
    _PARSERS[kind] = parse


def decode_position(text: str | None) -> Position | None:
    """Reverse :meth:`Position.encode`; ``None`` stays ``None``."""
    if text is None:
        return None
    kind, _, body = text.partition(":")
    parse = _PARSERS.get(kind) or _from_entry_points(kind)
    if parse is None:
        raise StateError(f"cannot decode stored position {text!r}: no connector registered "
                         f"positions of kind {kind!r}",
                         fix="install the connector that wrote this state (its package declares "
                             "the kind under the dblog.positions entry points)")
    try:
        return parse(body)
    except ValueError as exc:
        raise StateError(f"cannot decode stored position {text!r}: {exc}") from exc


def _from_entry_points(kind: str) -> Callable[[str], Position] | None:
    """A connector not imported yet declares its position kinds as ``dblog.positions`` entry
    points (``kind = "module:Class.parse"``), so a state can be read without building it."""
    for ep in entry_points(group="dblog.positions"):
        if ep.name == kind:
            parse: Callable[[str], Position] = ep.load()
            register_position(kind, parse)
            return parse
    return None
