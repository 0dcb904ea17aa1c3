"""MariaDB's own types (UUID, INET4, INET6) and spatial columns in their canonical form.

The binlog carries these columns as fixed binary strings (16, 4 and 16 bytes) or, for spatial
columns, as the stored geometry value; the chunk SELECT returns the text the server prints. Both
paths must give one value, or a log delete never matches the dumped row of the same key, so the
log path formats the bytes exactly as the server does:

- UUID: lowercase ``8-4-4-4-12`` hex (the server's output form);
- INET4: dotted quad;
- INET6: the server's own rule (MariaDB's ``Inet6::to_string``, the same as MySQL's
  ``INET6_NTOA``): the longest run of zero words, even a single one, becomes ``::`` (the first
  of equal runs); IPv4-compatible (``::a.b.c.d``) and IPv4-mapped (``::ffff:a.b.c.d``)
  addresses end in a dotted quad;
- spatial types: lowercase hex of the stored value, a 4-byte little-endian SRID followed by the
  WKB, which is what both the binlog and the SELECT carry.

Keys typed by a user (HTTP API, CLI) are brought to the same form by :func:`parse_canonical`.
"""

from __future__ import annotations

import ipaddress
import uuid
from typing import Any

NATIVE_TYPES = frozenset({"uuid", "inet4", "inet6"})
SPATIAL_TYPES = frozenset({"geometry", "point", "linestring", "polygon", "multipoint",
                           "multilinestring", "multipolygon", "geometrycollection"})


def _raw(value: Any, width: int) -> bytes:
    """The column's bytes; the binlog drops trailing zero bytes of fixed binary strings."""
    raw = value.encode("latin-1") if isinstance(value, str) else bytes(value)
    return raw.ljust(width, b"\0")


def to_uuid(value: Any) -> Any:
    if value is None:
        return None
    text = _raw(value, 16).hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def to_inet4(value: Any) -> Any:
    if value is None:
        return None
    a, b, c, d = _raw(value, 4)
    return f"{a}.{b}.{c}.{d}"


def _zero_gap(words: list[int]) -> tuple[int, int]:
    """(position, length) of the first longest run of zero words; (-1, -1) without one."""
    best, run = (-1, -1), (-1, -1)
    for i, word in enumerate(words):
        if word == 0:
            run = (i, 1) if run[0] < 0 else (run[0], run[1] + 1)
            if run[1] > best[1]:
                best = run
        else:
            run = (-1, -1)
    return best


def inet6_text(raw: bytes) -> str:
    """The server's text form of a 16-byte IPv6 address (see the module docstring)."""
    words = [raw[i] << 8 | raw[i + 1] for i in range(0, 16, 2)]
    pos, length = _zero_gap(words)
    parts: list[str] = []
    i = 0
    while i < 8:
        if i == pos:
            parts.append("::" if i == 0 else ":")
            i += length
            continue
        if i == 6 and pos == 0 and (length == 6 or (length == 5 and words[5] == 0xFFFF)):
            parts.append(".".join(str(b) for b in raw[12:]))
            break
        parts.append(f"{words[i]:x}" + (":" if i < 7 else ""))
        i += 1
    return "".join(parts)


def to_inet6(value: Any) -> Any:
    return None if value is None else inet6_text(_raw(value, 16))


def to_geometry_hex(value: Any) -> Any:
    if value is None:
        return None
    return (value.encode("latin-1") if isinstance(value, str) else bytes(value)).hex()


def parse_canonical(base: str, text: str) -> str:
    """A UUID/INET4/INET6 typed by a user, in the canonical form (ValueError when malformed)."""
    if base == "uuid":
        return str(uuid.UUID(text))
    if base == "inet4":
        return str(ipaddress.IPv4Address(text))
    return inet6_text(ipaddress.IPv6Address(text).packed)
