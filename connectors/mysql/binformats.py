"""Binary formats of binlog row images (MySQL's ``Field::pack`` forms), decoded straight to the
canonical values of types.py, for the generated decoders of rowcodec.py.

Fixed-width readers take ``(buf, pos)``; length-prefixed ones take the value's bytes.
Temporal columns are formatted without building ``datetime`` objects (the date part of a
TIMESTAMP is cached per day). Dates with a zero part and the zero TIMESTAMP are null, as on the
dump path.
"""

from __future__ import annotations

import codecs
import datetime
import functools
from collections.abc import Callable
from typing import Any

from pymysql.charset import charset_by_name

from .flavor import Flavor
from .nativetypes import to_geometry_hex, to_inet4, to_inet6, to_uuid
from .types import to_float32

Fixed = Callable[[bytes, int], Any]
Prefixed = Callable[[bytes], Any]
_EPOCH_DAY = datetime.date(1970, 1, 1).toordinal()
_DECIMAL_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_FRACTION_BYTES = (0, 1, 1, 2, 2, 3, 3)
_CACHED = 4096  # formatted temporal and DECIMAL values remembered per column
_MISS = object()
_WIDE = (("utf16le_", "utf-16-le"), ("utf16_", "utf-16-be"), ("utf32_", "utf-32-be"),
         ("ucs2_", "utf-16-be"))


def float32(value: float) -> float:
    return to_float32(value)  # type: ignore[no-any-return]


def int24(unsigned: bool) -> Fixed:
    def read(buf: bytes, pos: int) -> int:
        return int.from_bytes(buf[pos:pos + 3], "little", signed=not unsigned)

    return read


@functools.lru_cache(maxsize=4096)
def _day(days: int) -> str:
    return datetime.date.fromordinal(_EPOCH_DAY + days).isoformat()


def _clock(hour: int, minute: int, second: int, micros: int) -> str:
    # %-formatting: about twice as fast as f-strings with format specs, once per value
    if micros:
        return "%02d:%02d:%02d.%06d" % (hour, minute, second, micros)  # noqa: UP031
    return "%02d:%02d:%02d" % (hour, minute, second)  # noqa: UP031


def _fraction(fsp: int) -> tuple[int, int]:
    """(bytes, multiplier to microseconds) of a temporal column's fractional part."""
    size = _FRACTION_BYTES[fsp]
    return size, 10 ** (6 - 2 * size) if size else 0


class Cached:
    """A reader that remembers recent raw values: an update's two images, and rows written
    together, mostly carry the same temporal values, and formatting costs more than a lookup.
    ``read(buf, pos)`` is the reader (a closure: a call costs less than ``__call__``);
    ``compute`` (raw bytes to value) is what the compiled decoder calls, or, when ``native``
    names the type and its two parameters, formats itself."""

    __slots__ = ("compute", "native", "read", "width")

    def __init__(self, width: int, compute: Callable[[bytes], Any],
                 native: tuple[str, int, int] | None = None) -> None:
        self.width, self.compute, self.native = width, compute, native
        cache: dict[bytes, Any] = {}

        def read(buf: bytes, pos: int) -> Any:
            raw = buf[pos:pos + width]
            value = cache.get(raw, _MISS)  # not a KeyError: a miss is common (new values)
            if value is _MISS:
                if len(cache) >= _CACHED:
                    cache.clear()
                value = cache[raw] = compute(raw)
            return value

        self.read: Fixed = read

    def __call__(self, buf: bytes, pos: int) -> Any:
        return self.read(buf, pos)


def timestamp2(fsp: int) -> tuple[int, Fixed]:
    size, scale = _fraction(fsp)
    shift, mask = 8 * size, (1 << 8 * size) - 1

    def compute(raw: bytes) -> str | None:
        packed = int.from_bytes(raw, "big")
        if not packed:
            return None  # the zero TIMESTAMP
        seconds, micros = packed >> shift, (packed & mask) * scale
        days, rest = divmod(seconds, 86400)
        return f"{_day(days)} {_clock(rest // 3600, rest // 60 % 60, rest % 60, micros)}"

    return 4 + size, Cached(4 + size, compute, ("timestamp", fsp, 0))


def _date_text(year: int, month: int, day: int) -> str | None:
    if year == 0 or month == 0 or day == 0:
        return None  # no ISO form (see types.py)
    return f"{year:04d}-{month:02d}-{day:02d}"


def datetime2(fsp: int) -> tuple[int, Fixed]:
    size, scale = _fraction(fsp)

    def compute(raw: bytes) -> str | None:
        packed = int.from_bytes(raw[:5], "big") - 0x8000000000
        micros = int.from_bytes(raw[5:], "big") * scale if size else 0
        ymd, hms = packed >> 17, packed & 0x1FFFF
        year_month = ymd >> 5
        date = _date_text(year_month // 13, year_month % 13, ymd & 31)
        if date is None:
            return None
        return f"{date} {_clock(hms >> 12, hms >> 6 & 63, hms & 63, micros)}"

    return 5 + size, Cached(5 + size, compute, ("datetime", fsp, 0))


def time2(fsp: int) -> tuple[int, Fixed]:
    """MySQL's ``my_time_packed_from_binary``: a signed packed value, fraction included."""
    size, _ = _fraction(fsp)

    def read(buf: bytes, pos: int) -> str:
        intpart = int.from_bytes(buf[pos:pos + 3], "big") - 0x800000
        if size == 0:
            packed = intpart << 24
        elif size == 3:
            packed = int.from_bytes(buf[pos:pos + 6], "big") - 0x800000000000
        else:
            frac = int.from_bytes(buf[pos + 3:pos + 3 + size], "big")
            if intpart < 0 and frac:
                intpart, frac = intpart + 1, frac - (0x100 if size == 1 else 0x10000)
            packed = (intpart << 24) + frac * (10000 if size == 1 else 100)
        sign = "-" if packed < 0 else ""
        packed = abs(packed)
        hms, micros = packed >> 24, packed & 0xFFFFFF
        return sign + _clock(hms >> 12 & 0x3FF, hms >> 6 & 63, hms & 63, micros)

    return 3 + size, read


def date3(buf: bytes, pos: int) -> str | None:
    value = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16
    return _date_text(value >> 9, value >> 5 & 15, value & 31)


def decimal(precision: int, scale: int) -> tuple[int, Fixed]:
    """MySQL's binary DECIMAL: groups of 9 digits in 4 big-endian bytes, the leftover digits in
    fewer, the sign in the first bit (negative values have every bit inverted). Read as one
    big integer and split by shifts; recent values are remembered like temporal ones."""
    integral = precision - scale
    lead, full_int = _DECIMAL_BYTES[integral % 9], integral // 9
    full_frac, tail = scale // 9, scale % 9
    tail_bits = _DECIMAL_BYTES[tail] * 8
    size = lead + 4 * (full_int + full_frac) + tail_bits // 8
    flip, ones = 1 << (size * 8 - 1), (1 << size * 8) - 1
    fraction_bits = 32 * full_frac + tail_bits

    def digits(value: int, groups: int, last_bits: int, last_digits: int) -> int:
        """Groups of 9 decimal digits (32 bits each), then ``last_digits`` in the low bits."""
        out, shift = value & ((1 << last_bits) - 1) if last_bits else 0, last_bits
        scale_up = 10 ** last_digits
        for _ in range(groups):
            out += (value >> shift & 0xFFFFFFFF) * scale_up
            shift, scale_up = shift + 32, scale_up * 1_000_000_000
        return out

    def compute(raw: bytes) -> str:
        value = int.from_bytes(raw, "big") ^ flip
        negative = bool(value & flip)  # the stored sign bit was 0
        if negative:
            value ^= ones
        whole = digits(value >> fraction_bits, full_int, 0, 0) + (
            (value >> (fraction_bits + 32 * full_int)) * 10 ** (9 * full_int) if lead else 0)
        if not scale:
            return f"-{whole}" if negative and whole else str(whole)
        part = digits(value & ((1 << fraction_bits) - 1), full_frac, tail_bits, tail)
        text = "%d.%0*d" % (whole, scale, part)  # noqa: UP031 - faster than a nested f-string
        return "-" + text if negative and (whole or part) else text

    # an update's two images mostly carry the same amounts
    return size, Cached(size, compute, ("decimal", precision, scale))


def _bits(size: int) -> Fixed:
    def read(buf: bytes, pos: int) -> int:
        return int.from_bytes(buf[pos:pos + size], "big")

    return read


def _enum(labels: tuple[str, ...], size: int) -> Fixed:
    """``labels``: mysql-replication's list, with the error value '' at index 0."""
    def read(buf: bytes, pos: int) -> str:
        index = int.from_bytes(buf[pos:pos + size], "little")
        return labels[index] if index < len(labels) else ""

    return read


def _set(labels: tuple[str, ...], size: int) -> Fixed:
    def read(buf: bytes, pos: int) -> str:
        mask = int.from_bytes(buf[pos:pos + size], "little")
        return ",".join(label for i, label in enumerate(labels) if mask >> i & 1)

    return read


def _year(buf: bytes, pos: int) -> int:
    return buf[pos] + 1900 if buf[pos] else 0


def fixed_converter(column: Any, declared: str | None) -> tuple[int, Fixed] | None:
    """(size, reader) of a fixed-width, non-integer column; None for other columns."""
    kind = column.type
    fsp = int(getattr(column, "fsp", 0) or 0)
    readers: dict[int, Callable[[], tuple[int, Fixed]]] = {
        17: lambda: timestamp2(fsp), 18: lambda: datetime2(fsp), 19: lambda: time2(fsp),
        10: lambda: (3, date3), 13: lambda: (1, _year),
        246: lambda: decimal(int(column.precision), int(column.decimals)),
        16: lambda: (int(column.bytes), _bits(int(column.bytes))),
        247: lambda: (int(column.size), _enum(tuple(column.enum_values or ()),
                                               int(column.size))),
        248: lambda: (int(column.size), _set(tuple(column.set_values or ()), int(column.size))),
    }
    make = readers.get(kind)
    return None if make is None else make()


def _codec(column: Any) -> str:
    collation = getattr(column, "collation_name", None) or ""
    for prefix, codec in _WIDE:  # MySQL's UTF-16/32 and UCS-2 are big-endian without a BOM
        if collation.startswith(prefix):
            return codec
    name = getattr(column, "character_set_name", None)  # a charset or already a codec name
    if not name:
        return "utf-8"
    charset = charset_by_name(name)
    return str(charset.encoding) if charset else str(name)


def _utf8(raw: bytes) -> str:
    return raw.decode("utf-8")


UTF8: Prefixed = _utf8  # the compiled decoder decodes these columns itself

# MySQL's latin1 is cp1252 with the five bytes cp1252 leaves undefined (0x81, 0x8D, 0x8F, 0x90,
# 0x9D) mapped to U+0081 etc., as the server converts them on the dump path
_LATIN1 = "".join(bytes([b]).decode("cp1252", "ignore") or chr(b) for b in range(256))


def _latin1(raw: bytes) -> str:
    return codecs.charmap_decode(raw, "strict", _LATIN1)[0]


_TEXT_READERS: set[Prefixed] = set()  # one per charset (_text is cached)


@functools.cache
def _text(codec: str) -> Prefixed:
    try:
        name = codecs.lookup(codec).name
    except LookupError:
        name = ""  # fails as before, when a value is decoded
    if name == "utf-8":
        return UTF8
    if name == "cp1252":  # PyMySQL's codec of MySQL's latin1
        return _latin1

    def read(raw: bytes) -> str:
        return raw.decode(codec)

    _TEXT_READERS.add(read)
    return read


def is_text(convert: object) -> bool:
    """Whether a prefixed column's reader decodes text (it may fail on bytes invalid in the
    column's charset)."""
    return convert is UTF8 or convert is _latin1 or convert in _TEXT_READERS


def _hex(raw: bytes) -> str:
    return raw.hex()


def _padded(width: int) -> Prefixed:
    def read(raw: bytes) -> str:
        return raw.ljust(width, b"\0").hex()

    return read


_NATIVE: dict[tuple[str, int], Prefixed] = {("uuid", 16): to_uuid, ("inet4", 4): to_inet4,
                                           ("inet6", 16): to_inet6}


def prefixed_converter(column: Any, flavor: Flavor,
                       declared: str | None) -> tuple[int, Prefixed] | None:
    """(length-prefix width, reader) of a string, blob, spatial or MariaDB JSON column; None
    for columns this decoder does not take (MySQL's binary JSON)."""
    kind = column.type
    if kind in (15, 253, 254):
        max_length = int(getattr(column, "max_length", 0) or 0)
        width = 1 if max_length <= 255 else 2
        if getattr(column, "character_set_name", None) != "binary":
            return width, _text(_codec(column))
        if kind == 254:
            return width, _NATIVE.get((declared or "", max_length)) or _padded(max_length)
        return width, _hex
    if kind == 252:
        binary = getattr(column, "character_set_name", None) == "binary"
        return int(column.length_size), _hex if binary else _text(_codec(column))
    if kind == 255:
        return int(column.length_size), to_geometry_hex
    if kind == 245 and flavor.mariadb:
        return int(column.length_size), _text("utf-8")
    return None
