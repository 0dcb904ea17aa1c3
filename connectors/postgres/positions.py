"""PostgreSQL positions: the log sequence number."""

from __future__ import annotations

from typing import ClassVar

from dblog.core.positions import register_position


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

    def __str__(self) -> str:  # once per log event in the native format: %-formatting is
        return "%X/%X" % (self >> 32, self & 0xFFFFFFFF)  # noqa: UP031 - twice as fast

    def encode(self) -> str:
        return f"lsn:{self}"


register_position(Lsn.kind, Lsn.parse)
