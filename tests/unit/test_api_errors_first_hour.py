"""What an operator sees from the API and the CLI on a first mistake: ``dblog dump -t orders``
(no schema) answered with the table pattern's regular expression; a CLI whose token differs
from the running instance's was told to "send Authorization: Bearer <token>", not which
variable (``api.token_env``) to export."""

from __future__ import annotations

from typing import Any

import pytest

from dblog.api.client import ApiClient, ApiRequestError
from dblog.api.config import ApiConfig
from dblog.api.server import ApiServer
from tests.unit.apiserve import served


class IdleControl:
    """A control that is never reached: the requests here are refused before."""

    def request_dump(self, *_: Any) -> str:
        raise AssertionError("a refused request reached the engine")

    def set_dump_state(self, *_: Any) -> None:
        raise AssertionError("not reached")

    def set_knobs(self, *_: Any) -> None:
        raise AssertionError("not reached")

    def status(self) -> dict[str, Any]:
        return {"running": True, "role": "single", "dumps": []}


@pytest.mark.parametrize("body,where", [
    ({"tables": ["orders"]}, "tables.0"),
    ({"table": "orders", "keys": [[1]]}, "table"),
    ({"tables": ["public.orders", "bad;name.x"]}, "tables.1"),
])
def test_a_table_name_that_is_not_schema_table_is_named_with_the_form(
        body: dict[str, Any], where: str) -> None:
    with served(IdleControl()) as client:
        answer = client.post("/api/v1/dumps", json=body)
    assert answer.status_code == 422
    detail = answer.json()["detail"]
    bad = (body.get("tables") or [body.get("table")])[-1]
    assert detail.startswith(f"{where}: {bad!r} is not schema.table"), detail
    assert "e.g. public.orders" in detail and "pattern" not in detail, detail


def test_a_wrong_token_from_the_cli_names_the_variable_to_export(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("H25_TOKEN", "t0k-Right-123")
    server = ApiServer(IdleControl(), ApiConfig(port=0, token_env="H25_TOKEN")).start()
    try:
        client = ApiClient(server.url, "t0k-Wrong-456", token_env="H25_TOKEN")
        with pytest.raises(ApiRequestError) as refused:
            client.request("GET", "/api/v1/dumps")
        client.close()
    finally:
        server.stop()
    assert refused.value.status == 401
    assert refused.value.fix is not None and "export H25_TOKEN=" in refused.value.fix
    assert "t0k-Right-123" not in str(refused.value) and "t0k-Wrong" not in str(refused.value)
