"""Binlog binary formats of DECIMAL and TIMESTAMP to canonical text, read twice (the second read
comes from the per-column cache)."""

from __future__ import annotations

import pytest

from dblog.connectors.mysql import binformats as bf


@pytest.mark.parametrize(("raw", "text"), [
    (b"\x80\x00\x00\x04\xd2\x38", "1234.56"),
    (b"\x7f\xff\xff\xfb\x2d\xc7", "-1234.56"),
    (b"\x80\x00\x00\x00\x00\x00", "0.00"),
    (b"\x89\x3b\x9a\xc9\xff\x63", "9999999999.99"),
])
def test_decimal_12_2(raw: bytes, text: str) -> None:
    size, read = bf.decimal(12, 2)
    assert size == 6
    assert read(b"xx" + raw, 2) == text and read(raw, 0) == text


@pytest.mark.parametrize(("raw", "text"), [
    (b"\x65\x92\x00\x80\x00\x00\x01", "2024-01-01 00:00:00.000001"),
    (b"\x65\x92\x00\x80\x00\x00\x00", "2024-01-01 00:00:00"),
    (b"\x65\x92\x8d\x1f\x0f\x42\x3f", "2024-01-01 09:59:59.999999"),
    (bytes(7), None),  # the zero TIMESTAMP, null as on the dump path
])
def test_timestamp_6(raw: bytes, text: str | None) -> None:
    size, read = bf.timestamp2(6)
    assert size == 7
    assert read(raw, 0) == text and read(b"." + raw, 1) == text
