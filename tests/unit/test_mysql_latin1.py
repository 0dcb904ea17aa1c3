"""MySQL's latin1 is cp1252 with the five bytes cp1252 leaves undefined (0x81, 0x8D, 0x8F,
0x90, 0x9D) mapped to the C1 controls U+0081..U+009D: the log path decodes latin1 text as the
server converts it on the dump path, on both the generated and the compiled row decoders."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dblog.connectors.mysql import binformats as bf
from dblog.connectors.mysql import rowcodec
from dblog.connectors.mysql.flavor import Flavor

MARIADB = Flavor("mariadb", (10, 11), True)
_UNDEFINED_IN_CP1252 = b"\x81\x8d\x8f\x90\x9d"


def _latin1_column() -> SimpleNamespace:
    return SimpleNamespace(name="v", type=15, unsigned=False, fsp=0,
                           character_set_name="latin1", collation_name="latin1_swedish_ci",
                           max_length=20, enum_values=None, set_values=None)


def test_every_latin1_byte_decodes_as_mysql_converts_it() -> None:
    every = bytes(range(256))
    converted = bf.prefixed_converter(_latin1_column(), MARIADB, None)
    assert converted is not None
    text = converted[1](every)
    assert text == every.decode("cp1252", "surrogateescape").translate(
        {0xDC00 + b: b for b in _UNDEFINED_IN_CP1252})
    assert [text[b] for b in _UNDEFINED_IN_CP1252] == ["\x81", "\x8d", "\x8f", "\x90", "\x9d"]
    assert text[0x80] == "\u20ac" and text[0xE9] == "\u00e9"  # the euro sign, e acute


@pytest.mark.parametrize("compiled", [False, True])
def test_a_row_image_with_c1_bytes_decodes(compiled: bool) -> None:
    if compiled and not rowcodec.COMPILED:
        pytest.skip("the C extension is not built")
    codec = rowcodec.codec_for([_latin1_column()], MARIADB, {}, compiled=compiled)
    assert codec is not None
    value = b"a\x81b\x9dc"
    image = b"\x00" + bytes([len(value)]) + value  # null bitmap, length, bytes
    assert codec.decode(image, 0, len(image)) == [{"v": "a\x81b\x9dc"}]
