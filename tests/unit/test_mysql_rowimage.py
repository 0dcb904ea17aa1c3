"""The compiled row image decoder (_rowimage.c) against the generated Python decoders of
rowcodec.py: random table layouts of every column kind the connector decodes, random row
images (NULLs, extreme and invalid bytes) decode to equal rows, or fail with the same error."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dblog.connectors.mysql import binformats as bf
from dblog.connectors.mysql import rowcodec
from dblog.connectors.mysql.flavor import Flavor

MARIADB = Flavor("mariadb", (10, 11), True)
compiled = pytest.mark.skipif(not rowcodec.COMPILED, reason="the C extension is not built")
_INTS = [(1, 1), (2, 2), (9, 3), (3, 4), (8, 8)]  # binlog type, bytes
_TEXT_CHARSETS = [("utf8mb4", "utf8mb4_general_ci"), ("latin1", "latin1_swedish_ci"),
                  ("utf16", "utf16_general_ci"), ("binary", "binary")]


def _column(name: str, **fields: Any) -> SimpleNamespace:
    base: dict[str, Any] = {"unsigned": False, "fsp": 0, "character_set_name": None,
                            "collation_name": None, "max_length": 0, "enum_values": None,
                            "set_values": None}
    return SimpleNamespace(name=name, **{**base, **fields})


@st.composite
def columns(draw: st.DrawFn, name: str) -> SimpleNamespace:
    kind = draw(st.sampled_from(["int", "float", "double", "decimal", "temporal", "bit",
                                 "enum", "set", "varchar", "blob", "fixed_binary", "json",
                                 "geometry"]))
    if kind == "int":
        binlog_type, _ = draw(st.sampled_from(_INTS))
        return _column(name, type=binlog_type, unsigned=draw(st.booleans()))
    if kind in ("float", "double"):
        return _column(name, type=4 if kind == "float" else 5)
    if kind == "decimal":
        precision = draw(st.integers(1, 65))
        return _column(name, type=246, precision=precision,
                       decimals=draw(st.integers(0, min(precision, 30))))
    if kind == "temporal":
        return _column(name, type=draw(st.sampled_from([17, 18, 19, 10, 13])),
                       fsp=draw(st.integers(0, 6)))
    if kind == "bit":
        return _column(name, type=16, bytes=draw(st.integers(1, 8)))
    if kind in ("enum", "set"):
        labels = draw(st.lists(st.text(max_size=4), min_size=1, max_size=10))
        return _column(name, type=247 if kind == "enum" else 248, size=draw(st.sampled_from(
            [1, 2])), enum_values=["", *labels], set_values=labels)
    if kind in ("varchar", "fixed_binary"):
        charset, collation = ("binary", "binary") if kind == "fixed_binary" else draw(
            st.sampled_from(_TEXT_CHARSETS))
        return _column(name, type=15 if kind == "varchar" else 254, character_set_name=charset,
                       collation_name=collation, max_length=draw(st.sampled_from([16, 300])))
    if kind == "blob":
        charset, collation = draw(st.sampled_from(_TEXT_CHARSETS))
        return _column(name, type=252, character_set_name=charset, collation_name=collation,
                       length_size=draw(st.integers(1, 4)))
    return _column(name, type=245 if kind == "json" else 255, length_size=4)


_DECIMAL_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def _decimal_bytes(precision: int, scale: int, digits: str, negative: bool) -> bytes:
    """MySQL's binary DECIMAL of ``digits`` (precision digits, the last ``scale`` of them the
    fraction): digit groups of 9 in 4 big-endian bytes, leftovers in fewer, sign in bit 7."""
    integral, fraction = digits[:precision - scale], digits[precision - scale:]
    lead = len(integral) % 9
    groups = [(integral[:lead], _DECIMAL_BYTES[lead])] if lead else []
    groups += [(integral[i:i + 9], 4) for i in range(lead, len(integral), 9)]
    groups += [(fraction[i:i + 9], 4 if i + 9 <= len(fraction) else _DECIMAL_BYTES[
        len(fraction) - i]) for i in range(0, len(fraction), 9)]
    raw = bytearray(b"".join(int(text).to_bytes(size, "big") for text, size in groups))
    if negative:
        raw = bytearray(b ^ 0xFF for b in raw)
    raw[0] ^= 0x80
    return bytes(raw)


def _value(draw: st.DrawFn, spec: rowcodec.Spec) -> bytes:
    kind, width, a, b, _ = spec
    if kind == rowcodec.K_DECIMAL and draw(st.booleans()):
        digits = draw(st.text("0123456789", min_size=a, max_size=a))
        return _decimal_bytes(a, b, digits, draw(st.booleans()))
    if kind in (rowcodec.K_UTF8, rowcodec.K_PREFIXED):
        payload = draw(st.one_of(st.text(max_size=40).map(lambda t: t.encode()),
                                 st.binary(max_size=40)))
        if width == 1:
            payload = payload[:255]
        return len(payload).to_bytes(width, "little") + payload
    size = {rowcodec.K_DOUBLE: 8, rowcodec.K_FLOAT: 4}.get(kind, width)
    return draw(st.one_of(st.binary(min_size=size, max_size=size),
                          st.sampled_from([bytes(size), b"\xff" * size, b"\x80" + bytes(
                              size - 1), b"\x7f" + b"\xff" * (size - 1)])))


@st.composite
def events(draw: st.DrawFn) -> tuple[list[SimpleNamespace], bytes]:
    cols = draw(st.lists(st.integers(), min_size=1, max_size=12).map(len).flatmap(
        lambda n: st.tuples(*[columns(f"c{i}") for i in range(n)])))
    codec = rowcodec.codec_for(cols, MARIADB, {}, compiled=False)
    assert codec is not None
    data = b""
    for _ in range(draw(st.integers(1, 4))):
        nulls = [draw(st.booleans()) for _ in cols]
        bitmap = bytearray(codec.bitmap_size)
        for i, null in enumerate(nulls):
            bitmap[i >> 3] |= null << (i & 7)
        data += bytes(bitmap) + b"".join(_value(draw, c.spec) for c, null in zip(
            codec.columns, nulls, strict=True) if not null)
    return list(cols), data


def _outcome(codec: rowcodec.RowCodec, data: bytes) -> str:
    """The rows as text (field order included; NaN equals NaN), or the error's type."""
    try:
        return repr(codec.decode(b"head" + data + b"tail", 4, 4 + len(data)))
    except Exception as exc:  # the same failure on both paths is an equal outcome
        return type(exc).__name__


@compiled
@settings(max_examples=400, deadline=None)
@given(events())
def test_compiled_and_generated_decoders_agree(event: tuple[list[SimpleNamespace], bytes]
                                               ) -> None:
    cols, data = event
    python = rowcodec.codec_for(cols, MARIADB, {}, compiled=False)
    native = rowcodec.codec_for(cols, MARIADB, {}, compiled=True)
    assert python is not None and native is not None
    expected = _outcome(python, data)
    assert _outcome(native, data) == expected
    assert _outcome(native, data) == expected  # the second pass reads the caches


@pytest.mark.parametrize(("precision", "scale", "digits", "negative", "text"), [
    (12, 2, "000000123456", False, "1234.56"), (12, 2, "000000123456", True, "-1234.56"),
    (10, 0, "0000000000", True, "0"), (5, 5, "00000", True, "0.00000"),
    (65, 30, "9" * 65, True, "-" + "9" * 35 + "." + "9" * 30),
    (19, 9, "1000000000000000001", False, "1000000000.000000001")])
def test_the_test_encoder_writes_mysql_decimals(precision: int, scale: int, digits: str,
                                                negative: bool, text: str) -> None:
    size, read = bf.decimal(precision, scale)
    raw = _decimal_bytes(precision, scale, digits, negative)
    assert len(raw) == size and read(raw, 0) == text


@compiled
def test_known_values_decode_in_column_order() -> None:
    cols = [_column("id", type=8, unsigned=False), _column("u", type=9, unsigned=True),
            _column("s", type=9, unsigned=False), _column("name", type=15,
            character_set_name="utf8mb4", collation_name="utf8mb4_bin", max_length=32),
            _column("gone", type=3)]
    codec = rowcodec.codec_for(cols, MARIADB, {})
    assert codec is not None
    image = (bytes([0b10000]) + (-5).to_bytes(8, "little", signed=True) + b"\xff\xff\xff"
             + b"\xff\xff\xff" + bytes([6]) + "héllo".encode())
    rows = codec.decode(image * 2, 0, 2 * len(image))
    assert rows == [{"id": -5, "u": 0xFFFFFF, "s": -1, "name": "héllo", "gone": None}] * 2
    assert list(rows[0]) == ["id", "u", "s", "name", "gone"]


@compiled
@pytest.mark.parametrize("cut", [1, 3, 9, 12])
def test_a_truncated_image_is_an_error_not_a_short_row(cut: int) -> None:
    cols = [_column("id", type=8), _column("name", type=15, character_set_name="utf8mb4",
                                            collation_name="utf8mb4_bin", max_length=32)]
    codec = rowcodec.codec_for(cols, MARIADB, {})
    assert codec is not None
    image = bytes(1) + bytes(8) + bytes([5]) + b"hello"
    with pytest.raises(ValueError, match="runs past the end"):
        codec.decode(image, 0, cut)


@pytest.mark.skipif(os.environ.get("DBLOG_REQUIRE_SERVICES") != "1",
                    reason="only CI requires the compiled decoder")
def test_ci_builds_the_compiled_decoder() -> None:
    assert rowcodec.COMPILED, "connectors/mysql/_rowimage.c was not built (pip install -e .)"
