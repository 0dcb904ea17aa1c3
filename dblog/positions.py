"""Typed, ordered source positions.

A position is where the log reader can resume: everything up to and including it has been
handed out. Positions of one source kind are totally ordered; they serialise to a string
with a kind prefix so the state store can hold any of them.
"""

from __future__ import annotations

from typing import ClassVar, Protocol, runtime_checkable

from dblog.errors import StateError


@runtime_checkable
class Position(Protocol):
    """Positions of one kind are ordered (``<``); the order across kinds is undefined."""

    kind: ClassVar[str]

    def encode(self) -> str:
        """The stable string form, ``decode_position`` reverses it."""
        ...


class Lsn(int):
    """A PostgreSQL log sequence number: an immutable, ordered integer (one is made per log
    event, so it is an ``int`` subclass rather than a dataclass)."""

    __slots__ = ()
    kind: ClassVar[str] = "lsn"

    @property
    def value(self) -> int:
        return int(self)

    def __repr__(self) -> str:
        return f"Lsn({self})"

    @classmethod
    def parse(cls, text: str) -> Lsn:
        """Parse ``'16/B374D848'``."""
        high, _, low = text.partition("/")
        if not low:
            raise ValueError(f"not an LSN: {text!r}")
        return cls((int(high, 16) << 32) | int(low, 16))

    def __str__(self) -> str:
        value = int(self)
        return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"

    def encode(self) -> str:
        return f"lsn:{self}"


_DECODERS = {"lsn": Lsn.parse}


def decode_position(text: str | None) -> Position | None:
    """Reverse :meth:`Position.encode`; ``None`` stays ``None``."""
    if text is None:
        return None
    kind, _, body = text.partition(":")
    try:
        return _DECODERS[kind](body)
    except (KeyError, ValueError) as exc:
        raise StateError(f"cannot decode stored position {text!r}: {exc}") from exc
