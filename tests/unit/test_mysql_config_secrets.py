"""The MySQL source's configuration never shows its password: the model's repr, the
endpoint's repr, and a refused configuration's error (pydantic would quote the input)."""

from __future__ import annotations

import traceback

import pytest

from dblog.connectors.mysql import MysqlConfig, MysqlConnector
from dblog.connectors.mysql.db import parse_dsn
from dblog.errors import ConfigError

PASSWORD = "Wq7-mysql-pw-93"
DSN = f"mysql://cdc:{PASSWORD}@127.0.0.1:3306/"


def test_reprs_show_no_password() -> None:
    config = MysqlConfig(dsn=DSN)
    shown = [repr(config), str(config), repr(parse_dsn(DSN)), repr(MysqlConnector(config).config)]
    for text in shown:
        assert PASSWORD not in text, text
    assert "127.0.0.1" in repr(config)  # the connection string keeps its shape


@pytest.mark.parametrize("bad", [{"dsn": DSN, "server_id": 0}, {"dsn": DSN, "nope": 1},
                                 {"dsn": f"mysql:/cdc:{PASSWORD}@"}])
def test_a_refused_configuration_names_the_field_without_the_password(bad: dict[str, object]
                                                                       ) -> None:
    with pytest.raises(ConfigError) as raised:
        MysqlConnector(bad)
    text = "".join(traceback.format_exception(raised.value))
    assert PASSWORD not in text, text
    assert "source:" in str(raised.value)
