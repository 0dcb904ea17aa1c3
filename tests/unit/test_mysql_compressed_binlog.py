"""Binlog events the connector cannot read (MariaDB's compressed events of
``log_bin_compress=ON``, MySQL's transaction payloads of ``binlog_transaction_compression=ON``
and partial JSON updates) stop the stream with the fix; mysql-replication would skip them and
their rows would be lost. ``dblog check`` reports the settings that make the server write them."""

from __future__ import annotations

import pytest

from dblog.connectors.mysql.fastpath import _HEADER, FastPath
from dblog.connectors.mysql.setup import check_binlog
from dblog.errors import FatalSourceError

_GOOD = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL",
         "binlog_row_metadata": "FULL"}


def _event(kind: int, body: bytes = b"\x01\x00\x00\x00\x00\x00\x00\x00") -> bytes:
    return _HEADER.pack(1700000000, kind, 1, 19 + len(body), 4000, 0) + body


def _fast_path() -> FastPath:
    return FastPath(lambda *args: None, lambda: False)


@pytest.mark.parametrize(("kind", "setting"), [
    *((kind, "log_bin_compress = OFF") for kind in range(0xA5, 0xAC)),
    (0x28, "binlog_transaction_compression = OFF"), (0x27, "binlog_row_value_options = ''")])
def test_an_event_the_connector_cannot_read_stops_the_stream(kind: int, setting: str) -> None:
    with pytest.raises(FatalSourceError) as caught:
        _fast_path().intercept(_event(kind))
    assert f"type {kind}" in caught.value.message
    assert f"SET GLOBAL {setting}" in (caught.value.fix or "")
    assert "request a full dump" in (caught.value.fix or "")


@pytest.mark.parametrize("kind", [0xA0, 0xA1, 0xA3, 0x02, 0x0F, 0x1B])
def test_other_events_still_go_to_mysql_replication(kind: int) -> None:
    assert _fast_path().intercept(_event(kind)) is False


def test_check_reports_mariadb_binlog_compression() -> None:
    findings = check_binlog({**_GOOD, "log_bin_compress": "ON"})
    assert [(f.level, "log_bin_compress=ON" in f.message) for f in findings] == [("error", True)]
    assert "SET GLOBAL log_bin_compress = OFF" in (findings[0].fix or "")
    assert "log_bin_compress=OFF" in (findings[0].fix or "").replace(" = ", "=") \
        and "my.cnf" in (findings[0].fix or "")


def test_check_reports_mysql_transaction_compression() -> None:
    findings = check_binlog({**_GOOD, "binlog_transaction_compression": "ON"})
    assert len(findings) == 1 and findings[0].level == "error"
    assert "SET GLOBAL binlog_transaction_compression = OFF" in (findings[0].fix or "")


def test_check_passes_uncompressed_binlogs() -> None:
    assert check_binlog({**_GOOD, "log_bin_compress": "OFF",
                         "binlog_transaction_compression": "OFF"}) == []
