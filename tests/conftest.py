import os
from collections.abc import Iterator

import pytest


def require_services() -> bool:
    return os.environ.get("DBLOG_REQUIRE_SERVICES") == "1"


def unavailable(what: str, reason: str) -> None:
    """A missing server fails the run in CI (DBLOG_REQUIRE_SERVICES=1) and skips elsewhere."""
    message = f"{what} unavailable: {reason}"
    if require_services():
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def zk_hosts() -> Iterator[str]:
    """A ZooKeeper for the session: ``DBLOG_ZK_HOSTS`` or a throwaway server from the harness."""
    external = os.environ.get("DBLOG_ZK_HOSTS")
    if external:
        yield external
        return
    from dblog.harness.postgres import HarnessError
    from dblog.harness.zookeeper import start_zookeeper

    try:
        server = start_zookeeper()
    except (HarnessError, OSError) as exc:
        unavailable("ZooKeeper", str(exc))
    try:
        yield server.hosts
    finally:
        server.stop()
