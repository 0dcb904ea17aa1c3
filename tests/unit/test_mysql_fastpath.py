"""The binlog fast path's own packet reads (a real PyMySQL connection object fed bytes)."""

from __future__ import annotations

import io
from typing import Any

import pymysql
import pytest

from dblog.connectors.mysql.errors import StreamLost
from dblog.connectors.mysql.fastpath import read_payload


def _packet(number: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "little") + bytes([number]) + payload


def _connection(stream: bytes, next_seq: int = 0) -> Any:
    conn = pymysql.connections.Connection(defer_connect=True)
    conn._rfile, conn._next_seq_id = io.BytesIO(stream), next_seq
    return conn


def test_payloads_come_in_order_with_the_sequence_number_wrapping() -> None:
    conn = _connection(_packet(255, b"\x00first") + _packet(0, b"") + _packet(1, b"\x00third"),
                       next_seq=255)
    assert [read_payload(conn) for _ in range(3)] == [b"\x00first", b"", b"\x00third"]
    assert conn._next_seq_id == 2


def test_a_payload_of_16_mib_or_more_continues_in_the_next_packet() -> None:
    first, rest = b"\x00" + b"a" * (0xFFFFFF - 1), b"tail"
    conn = _connection(_packet(3, first) + _packet(4, rest) + _packet(5, b"next"), next_seq=3)
    assert read_payload(conn) == first + rest
    assert read_payload(conn) == b"next"


@pytest.mark.parametrize("stream", [_packet(0, b"\x00abc")[:-1], b"\x05\x00"],
                         ids=["short payload", "short header"])
def test_a_cut_connection_is_a_lost_stream(stream: bytes) -> None:
    conn = _connection(stream)
    with pytest.raises(StreamLost, match="Lost connection"):
        read_payload(conn)
    assert conn._rfile is None  # closed, as PyMySQL closes it


def test_a_wrong_sequence_number_fails_as_in_pymysql() -> None:
    with pytest.raises(StreamLost):  # MariaDB shutting down sends number 0
        read_payload(_connection(_packet(0, b"\xff"), next_seq=7))
    with pytest.raises(pymysql.err.InternalError, match="got 9 expected 7"):
        read_payload(_connection(_packet(9, b"\x00"), next_seq=7))
