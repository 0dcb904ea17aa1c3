import os

import pytest


def require_services() -> bool:
    return os.environ.get("DBLOG_REQUIRE_SERVICES") == "1"


def unavailable(what: str, reason: str) -> None:
    """A missing server fails the run in CI (DBLOG_REQUIRE_SERVICES=1) and skips elsewhere."""
    message = f"{what} unavailable: {reason}"
    if require_services():
        pytest.fail(message)
    pytest.skip(message)
