"""The connector's own row decoder: binlog row images straight from the event's bytes to
canonical rows, with a decoder prepared once per table version.

mysql-replication keeps the connection, the protocol and the event framing (table maps, the
row event header); its per-column row parsing costs most of the stream's time, so the rows are
decoded here instead. For each table map (one table version) and each null pattern of a row
image, Python source is generated that reads the image with ``struct`` formats for runs of
fixed-width columns and direct slicing for the rest, applying each column's canonical
conversion inline; it is compiled once and cached. The generated code only names
precomputed constants (structs, converters) and the column names as string literals
(``repr``), never text from the server.

When the C extension ``_rowimage`` is built (setup.py; it needs a C compiler at install), the
same layout is handed to it as one spec per column and it decodes the images instead: integers,
floats, UTF-8 text and the text of TIMESTAMP/DATETIME/DECIMAL values in C (the last values of
each column remembered), the other columns through the same converters. The generated
decoders stay the fallback; a property test holds the two to equal output.

The values equal the chunk SELECT's canonical values (types.py, nativetypes.py); the binary
formats of the fixed and temporal columns are in ``binformats.py``. Columns this decoder does
not take (MySQL 8's binary JSON) make :func:`codec_for` return None and the table keeps
mysql-replication's row parsing. Row images must be complete (``binlog_row_image=FULL``): an
event whose column bitmap leaves columns out stops the stream with the fix.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from pymysqlreplication.row_event import UpdateRowsEvent

from dblog.errors import FatalSourceError

from . import binformats as bf
from .flavor import Flavor

try:
    from . import _rowimage
except ImportError:  # not built (no C compiler at install): the generated decoders only
    _rowimage = None  # type: ignore[assignment]
COMPILED = _rowimage is not None

Image = dict[str, Any]
Decode = Callable[[bytes, int, int], tuple[Image, int]]
_STRUCT_CODES = {(1, False): "b", (1, True): "B", (2, False): "h", (2, True): "H",
                 (3, False): "", (4, False): "i", (4, True): "I", (8, False): "q",
                 (8, True): "Q"}
_INT_WIDTH = {1: 1, 2: 2, 9: 3, 3: 4, 8: 8}
_PATTERNS_KEPT = 256


# the compiled decoder's column kinds (_rowimage.c)
K_INT, K_DOUBLE, K_FLOAT, K_FIXED = range(1, 5)
K_UTF8, K_PREFIXED, K_TIMESTAMP, K_DATETIME, K_DECIMAL = range(6, 11)
_NATIVE_KINDS = {"timestamp": K_TIMESTAMP, "datetime": K_DATETIME, "decimal": K_DECIMAL}
# kind, width, two parameters (signed; fractional digits; precision and scale), converter
Spec = tuple[int, int, int, int, Callable[..., Any] | None]


class Column:
    """How one column's value is laid out and converted; ``code`` returns the lines that
    read it into ``v{i}`` (``pos`` advanced), with ``env`` the constants they name; ``spec``
    describes the same to the compiled decoder."""

    __slots__ = ("code", "fixed", "name", "spec")

    def __init__(self, name: str, fixed: str | None,
                 code: Callable[[int, dict[str, Any]], list[str]], spec: Spec) -> None:
        self.name = name
        self.fixed = fixed  # a struct code when the value is one fixed-width number
        self.code = code
        self.spec = spec


def _convert_fixed(size: int, convert: Callable[[bytes, int], Any]) -> Callable[
        [int, dict[str, Any]], list[str]]:
    if isinstance(convert, bf.Cached):
        convert = convert.read

    def code(i: int, env: dict[str, Any]) -> list[str]:
        env[f"c{i}"] = convert
        return [f"if pos + {size} > end: short(pos)", f"v{i} = c{i}(buf, pos)",
                f"pos += {size}"]

    return code


def _length_prefixed(width: int, convert: Callable[[bytes], Any]) -> Callable[
        [int, dict[str, Any]], list[str]]:
    def code(i: int, env: dict[str, Any]) -> list[str]:
        env[f"c{i}"] = convert
        if width == 1:
            size = "buf[pos]"
        elif width == 2:
            size = "buf[pos] | buf[pos + 1] << 8"
        else:
            size = f"int.from_bytes(buf[pos:pos + {width}], 'little')"
        return [f"if pos + {width} > end: short(pos)", f"n = {size}", f"pos += {width}",
                "if pos + n > end: short(pos)", f"v{i} = c{i}(buf[pos:pos + n])", "pos += n"]

    return code


def _fixed_spec(size: int, read: bf.Fixed) -> Spec:
    if isinstance(read, bf.Cached) and read.native is not None:
        name, a, b = read.native
        return _NATIVE_KINDS[name], size, a, b, read.compute
    return K_FIXED, size, 0, 0, read


def _column(column: Any, flavor: Flavor, declared: str | None) -> Column | None:
    """The layout of one binlog column, or None when this decoder does not take it."""
    kind, name = column.type, column.name
    if kind in _INT_WIDTH:
        width, unsigned = _INT_WIDTH[kind], bool(column.unsigned)
        spec: Spec = (K_INT, width, int(not unsigned), 0, None)
        if width == 3:
            return Column(name, None, _convert_fixed(3, bf.int24(unsigned)), spec)
        return Column(name, _STRUCT_CODES[width, unsigned], lambda i, env: [], spec)
    fixed = bf.fixed_converter(column, declared)
    if fixed is not None:
        return Column(name, None, _convert_fixed(*fixed), _fixed_spec(*fixed))
    if kind == 4:
        return Column(name, "f", lambda i, env: [f"v{i} = f32(v{i})"],
                      (K_FLOAT, 4, 0, 0, bf.float32))
    if kind == 5:
        return Column(name, "d", lambda i, env: [], (K_DOUBLE, 8, 0, 0, None))
    prefixed = bf.prefixed_converter(column, flavor, declared)
    if prefixed is None:
        return None
    width, convert = prefixed
    spec = (K_UTF8, width, 0, 0, None) if convert is bf.UTF8 else (
        K_PREFIXED, width, 0, 0, convert)
    return Column(name, None, _length_prefixed(*prefixed), spec)


def _source(columns: Sequence[Column], nulls: Sequence[bool], env: dict[str, Any]) -> str:
    """The body of one image decoder: runs of fixed-width numbers in one ``unpack_from``."""
    lines = ["def decode(buf, pos, end):"]
    run: list[int] = []

    def flush() -> None:
        if not run:
            return
        fmt = struct.Struct("<" + "".join(columns[i].fixed or "" for i in run))
        env[f"s{run[0]}"] = fmt
        names = ", ".join(f"v{i}" for i in run)
        lines.append(f"    if pos + {fmt.size} > end: short(pos)")
        lines.append(f"    ({names},) = s{run[0]}.unpack_from(buf, pos)")
        lines.append(f"    pos += {fmt.size}")
        for i in run:
            lines.extend("    " + line for line in columns[i].code(i, env))
        run.clear()

    for i, column in enumerate(columns):
        if nulls[i]:
            lines.append(f"    v{i} = None")
        elif column.fixed:
            run.append(i)
        else:
            flush()
            lines.extend("    " + line for line in column.code(i, env))
    flush()
    items = ", ".join(f"{c.name!r}: v{i}" for i, c in enumerate(columns))
    lines.append(f"    return {{{items}}}, pos")
    return "\n".join(lines)


class RowCodec:
    """Decodes the row images of one table version (see the module docstring): with the
    compiled decoder when it is built and ``compiled`` is true, else with generated Python."""

    def __init__(self, columns: Sequence[Column], compiled: bool = True) -> None:
        self.columns = list(columns)
        self.decode: Callable[[bytes, int, int], list[Image]] = self._decode_python
        if compiled and _rowimage is not None:
            self.decode = _rowimage.Layout(tuple((c.name, *c.spec) for c in columns)).decode
        self.count = len(columns)
        self.bitmap_size = (self.count + 7) // 8
        self.full = bytes([0xFF] * (self.count // 8)) + (
            bytes([(1 << (self.count % 8)) - 1]) if self.count % 8 else b"")
        self._by_nulls: dict[bytes, Decode] = {}

    def _compile(self, bitmap: bytes) -> Decode:
        nulls = [bool(bitmap[i >> 3] >> (i & 7) & 1) for i in range(self.count)]
        env: dict[str, Any] = {"f32": bf.float32, "short": _short}
        exec(_source(self.columns, nulls, env), env)  # generated code: see the docstring
        decode: Decode = env["decode"]
        if len(self._by_nulls) >= _PATTERNS_KEPT:
            self._by_nulls.clear()
        self._by_nulls[bitmap] = decode
        return decode

    def check_present(self, bitmaps: Sequence[bytes], table: object) -> None:
        """Refuse row images that leave columns out (``binlog_row_image`` not FULL)."""
        for bitmap in bitmaps:
            if bytes(bitmap) != self.full:
                raise FatalSourceError(
                    f"a row event of {table} leaves columns out (binlog_row_image is not "
                    "FULL): dblog cannot rebuild the row",
                    fix="SET GLOBAL binlog_row_image = 'FULL' (and in my.cnf), then request "
                        "a dump of the tables changed meanwhile")

    def images(self, event: Any) -> list[Image]:
        """Every row image of a mysql-replication rows event, in order (an update: before,
        after, ...)."""
        bitmaps = [event.columns_present_bitmap]
        if isinstance(event, UpdateRowsEvent):
            bitmaps.append(event.columns_present_bitmap2)
        self.check_present(bitmaps, f"{event.schema}.{event.table}")
        packet = event.packet
        data = packet.read(event.event_size - packet.read_bytes)
        return self.decode(data, 0, len(data))

    def _decode_python(self, data: bytes, pos: int, end: int) -> list[Image]:
        """The row images in ``data[pos:end]``."""
        size, by_nulls = self.bitmap_size, self._by_nulls
        out: list[Image] = []
        while pos < end:
            if pos + size > end:
                _short(pos)
            bitmap = data[pos:pos + size]
            decode = by_nulls.get(bitmap) or self._compile(bitmap)
            image, pos = decode(data, pos + size, end)
            out.append(image)
        return out


def _short(pos: int) -> None:
    """A row image that runs past ``end``: the compiled decoder's error."""
    raise ValueError(f"row image runs past the end of its event at byte {pos}")


def codec_for(columns: Sequence[Any], flavor: Flavor, declared: dict[str, str],
              compiled: bool = True) -> RowCodec | None:
    """The decoder for a table map's columns, or None to keep mysql-replication's parsing."""
    layout = []
    for column in columns:
        one = _column(column, flavor, declared.get(column.name))
        if one is None:
            return None
        layout.append(one)
    return RowCodec(layout, compiled)
