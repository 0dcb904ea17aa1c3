"""The generated (pure-Python) row decoder refuses a row image that runs past the end of its
event, with the compiled decoder's error, instead of slicing short values."""

from __future__ import annotations

from types import SimpleNamespace as NS
from typing import Any

import pytest

from dblog.connectors.mysql import rowcodec
from dblog.connectors.mysql.flavor import Flavor

_FLAVOR = Flavor("mariadb", (10, 11), True)
_INT = NS(name="id", type=3, unsigned=False)
_INT24 = NS(name="m", type=9, unsigned=False)
_VARCHAR = NS(name="v", type=15, max_length=40, character_set_name="utf8mb4",
              collation_name="utf8mb4_general_ci")
_DATE = NS(name="d", type=10)
_CASES = [
    ([_INT, _VARCHAR], bytes([0]) + (7).to_bytes(4, "little") + bytes([5]) + b"ab", None),
    ([_INT, _VARCHAR], bytes([0]) + (7).to_bytes(4, "little"), None),  # no length byte
    ([_INT24], bytes([0]) + b"\x01\x02", None),
    ([_INT], bytes([0]) + b"\x01\x02", None),
    ([_DATE], bytes([0]) + b"\x01", None),
    ([_INT] * 9, bytes([0]), None),  # the null bitmap (2 bytes) is cut short
    # the image's last bytes lie past ``end`` (in the event's checksum)
    ([_INT, _VARCHAR], bytes([0]) + (7).to_bytes(4, "little") + bytes([2]) + b"ab", 7),
]


def _codecs(columns: list[Any]) -> list[rowcodec.RowCodec]:
    out = [rowcodec.codec_for(columns, _FLAVOR, {}, compiled=False)]
    if rowcodec.COMPILED:
        out.append(rowcodec.codec_for(columns, _FLAVOR, {}, compiled=True))
    return [c for c in out if c is not None]


@pytest.mark.parametrize(("columns", "data", "end"), _CASES)
def test_truncated_images_raise(columns: list[Any], data: bytes, end: int | None) -> None:
    for codec in _codecs(columns):
        with pytest.raises(ValueError, match="runs past the end of its event"):
            codec.decode(data, 0, len(data) if end is None else end)


def test_complete_images_still_decode() -> None:
    data = bytes([0]) + (7).to_bytes(4, "little") + bytes([2]) + b"ab"
    for codec in _codecs([_INT, _VARCHAR]):
        assert codec.decode(data + data, 0, 2 * len(data)) == [{"id": 7, "v": "ab"}] * 2
