"""``dblog.app.configcheck.validated``: the one place a source's dict configuration becomes its
model; both SQL connectors use it, so a refused dict names the field without the password."""

from __future__ import annotations

import traceback

import pytest
from pydantic import BaseModel, ConfigDict

from dblog.app.configcheck import validated
from dblog.connectors.mysql import MysqlConnector
from dblog.connectors.postgres import PostgresConnector
from dblog.errors import ConfigError

PASSWORD = "Zr4-shared-pw-61"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dsn: str
    size: int = 1


def test_validated_gives_the_model() -> None:
    assert validated(_Model, {"dsn": "x", "size": 3}) == _Model(dsn="x", size=3)


def test_validated_names_section_and_field_and_masks_the_secret() -> None:
    dsn = f"mysql://u:{PASSWORD}@h/"
    with pytest.raises(ConfigError) as refused:
        validated(_Model, {"dsn": dsn, "size": "many"}, section="output")
    assert str(refused.value).startswith("output: size:"), refused.value
    assert refused.value.fix == "see docs/configuration.md"
    assert PASSWORD not in "".join(traceback.format_exception(refused.value))


@pytest.mark.parametrize(("connector", "bad"), [
    (MysqlConnector, {"dsn": f"mysql://cdc:{PASSWORD}@127.0.0.1/", "server_id": 0}),
    (PostgresConnector, {"dsn": f"host=127.0.0.1 password={PASSWORD}", "slot": 5}),
])
def test_both_sql_connectors_refuse_a_dict_through_it(connector: type, bad: dict[str, object]
                                                      ) -> None:
    with pytest.raises(ConfigError) as refused:
        connector(bad)
    text = "".join(traceback.format_exception(refused.value))
    assert str(refused.value).startswith("source: "), refused.value
    assert list(bad)[1] in str(refused.value)
    assert PASSWORD not in text, text
