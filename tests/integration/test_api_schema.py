"""The OpenAPI schema the instance serves, exercised by schemathesis against the real server
on a running pipeline: no answer may be a server error (key-range requests included: the
engine dumps them)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from .test_api_env import TOKEN, Env, running

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def env(pg_admin_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with running(pg_admin_dsn, tmp_path_factory.mktemp("schema"), rows=2000) as e:
        yield e


def _exercise(operation: Any, seen: dict[str, set[int]]) -> None:
    """Up to 25 generated requests of one operation, each answered without a server error."""
    label = f"{operation.method.upper()} {operation.path}"

    @given(case=operation.as_strategy())
    @settings(max_examples=25, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def exercise(case: Any) -> None:
        response = case.call(headers={"Authorization": f"Bearer {TOKEN}"})
        seen.setdefault(label, set()).add(response.status_code)
        case.validate_response(response, checks=[not_a_server_error])
        assert response.status_code != 401, response.text  # the token was accepted

    exercise()


def test_no_server_errors(env: Env) -> None:
    schema: Any = schemathesis.openapi.from_url(f"{env.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 8
    seen: dict[str, set[int]] = {}
    for operation in operations:
        _exercise(operation, seen)
    print({label: sorted(codes) for label, codes in seen.items()})
    assert any(200 in codes or 201 in codes for codes in seen.values())
    assert any(422 in codes for codes in seen.values())
