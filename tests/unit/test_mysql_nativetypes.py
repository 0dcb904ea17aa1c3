"""MariaDB UUID/INET4/INET6 and spatial values in the server's text form, and the refusal of
column types without a canonical form (issue 15)."""

from __future__ import annotations

import ipaddress

import pytest

from dblog.connectors.mysql.nativetypes import (
    inet6_text,
    parse_canonical,
    to_geometry_hex,
    to_inet4,
    to_inet6,
    to_uuid,
)
from dblog.connectors.mysql.types import json_expression, unsupported


def test_uuid_bytes_print_like_the_server() -> None:
    raw = bytes.fromhex("aafa4db5e7ab11f18b7e02fc00000001")
    assert to_uuid(raw) == "aafa4db5-e7ab-11f1-8b7e-02fc00000001"
    # the binlog drops trailing zero bytes of a fixed binary string
    assert to_uuid(b"\x01") == "01000000-0000-0000-0000-000000000000"
    assert to_uuid(None) is None
    assert parse_canonical("uuid", "AAFA4DB5-E7AB-11F1-8B7E-02FC00000001") == to_uuid(raw)


def test_inet4_pads_dropped_zero_bytes() -> None:
    assert to_inet4(b"\n\x00\x00\x01") == "10.0.0.1"
    assert to_inet4("") == "0.0.0.0" and to_inet4(b"\x01") == "1.0.0.0"
    assert parse_canonical("inet4", "10.0.0.1") == "10.0.0.1"


@pytest.mark.parametrize(("text", "server"), [
    ("::", "::"), ("::1", "::1"), ("1::", "1::"), ("::ffff:1.2.3.4", "::ffff:1.2.3.4"),
    ("::1.2.3.4", "::1.2.3.4"), ("1:0:2:3:4:5:6:7", "1::2:3:4:5:6:7"),
    ("1:0:0:2:0:0:0:3", "1:0:0:2::3"), ("1:0:0:2:3:0:0:4", "1::2:3:0:0:4"),
    ("2001:DB8::FF00:42:8329", "2001:db8::ff00:42:8329"), ("::ffff:0:1.2.3.4", "::ffff:0:102:304"),
])
def test_inet6_follows_the_server_rule(text: str, server: str) -> None:
    raw = ipaddress.IPv6Address(text).packed
    assert inet6_text(raw) == server
    assert to_inet6(raw.rstrip(b"\0")) == server
    assert parse_canonical("inet6", text) == server


def test_spatial_values_are_hex_of_the_stored_bytes() -> None:
    assert to_geometry_hex(b"\x00\x00\x00\x00\x01\x01") == "000000000101"


def test_types_without_a_canonical_form_are_refused() -> None:
    for column_type in ("uuid", "inet4", "inet6", "point", "geometry", "json", "bigint(20)",
                        "varchar(3)", "enum('a')", "timestamp(6)", "bit(1)", "longblob"):
        assert not unsupported(column_type), column_type
    for column_type in ("vector(3)", "xml", "some_plugin_type"):
        assert unsupported(column_type), column_type
    assert json_expression("longtext", "utf8mb4_bin") == "CAST({col} AS CHAR)"
    assert json_expression("uuid", None) == "{col}" and json_expression("point", None) is None
