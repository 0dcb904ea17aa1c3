"""The SQL output claims its checkpoint row and loads it in one step, on every SQL target
(SQLite, PostgreSQL, MariaDB): what a new leader loads is exactly the row it fenced.

A deposed leader's commit is injected at the worst moment: right after the new leader's
statement that reads the checkpoint row. Had the read come before the claim (two
transactions), that commit would land between them and the new leader would start from a
stale checkpoint (its truncate barriers and state missing the deposed commit). With the row
locked from before the read, the deposed commit waits for the claim (here it gives up after a
short lock timeout) and is refused by the fence afterwards.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import sqlalchemy as sa

from dblog.core.model import TableId, TableInfo
from dblog.errors import LeadershipLost, RetryableOutputError
from dblog.outputs.sql import SqlOutput
from dblog.spi import Checkpoint
from tests.integration.conftest import pg_admin_dsn
from tests.integration.mysql_fixtures import maria_admin_dsn
from tests.replica_targets import SqlTarget, int_info, target_fixture
from tests.unit.test_replica_sim import TABLES, Source, boundaries

__all__ = ["maria_admin_dsn", "pg_admin_dsn"]
A = TABLES[0]
CHECKPOINTS = "claim_ckpt"


@pytest.fixture(params=["sqlite", "postgres", "mariadb"])
def sql_target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlTarget]:
    infos: dict[TableId, TableInfo] = {t: int_info(t) for t in TABLES}
    for made in target_fixture(request.param, request, tmp_path, infos.get):
        assert isinstance(made, SqlTarget)
        yield made


def impatient(url: str) -> str:
    """``url`` with a lock wait of about a second at most (the deposed leader's connection)."""
    parsed = sa.make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return parsed.update_query_dict({"timeout": "0.3"}).render_as_string(False)
    if backend == "postgresql":
        return parsed.update_query_dict({"options": "-c lock_timeout=300"}) \
            .render_as_string(False)
    return parsed.update_query_dict({"init_command": "SET innodb_lock_wait_timeout=1"}) \
        .render_as_string(False)


def stored_state(target: SqlTarget) -> dict[str, Any] | None:
    with target.engine.connect() as conn:
        text = conn.execute(sa.text(f"SELECT state FROM {CHECKPOINTS}")).scalar_one()
    return None if text is None else dict(orjson.loads(text))


@contextlib.contextmanager
def after_first(deposed_url: str, verb: str, action: Callable[[], None]) -> Iterator[None]:
    """Run ``action`` (the deposed leader's move) once, right after the first ``verb``
    statement on the checkpoint table made by anyone but the deposed leader itself."""
    done: list[bool] = []

    def hook(conn: sa.Connection, _cursor: Any, statement: str, *_: Any) -> None:
        if done or conn.engine.url.render_as_string(False) == deposed_url \
                or CHECKPOINTS not in statement \
                or not statement.lstrip().upper().startswith(verb):
            return
        done.append(True)
        action()

    sa.event.listen(sa.engine.Engine, "after_cursor_execute", hook)
    try:
        yield
    finally:
        sa.event.remove(sa.engine.Engine, "after_cursor_execute", hook)


def test_a_new_leader_loads_exactly_the_checkpoint_it_fenced(sql_target: SqlTarget) -> None:
    target = sql_target
    events = Source("pg", random.Random(6)).run(20)
    half = boundaries(events)[len(boundaries(events)) // 2]
    deposed_url = impatient(target.url)
    deposed = target.new_output(epoch=1, url=deposed_url, checkpoint_table=CHECKPOINTS)
    deposed.open(0)
    deposed.write(events[:half])
    first = {"seq": half, "dumps": [], "position": None}
    deposed.flush_checkpoint(Checkpoint("contract", 1, first))
    deposed.write(events[half:])  # frozen here, its commit about to go
    last = {"seq": len(events), "dumps": [], "position": None}
    outcome: list[str] = []

    def deposed_commits() -> None:
        try:
            deposed.flush_checkpoint(Checkpoint("contract", 1, last))
            outcome.append("committed")
        except (RetryableOutputError, LeadershipLost) as exc:
            outcome.append(type(exc).__name__)

    successor = target.new_output(epoch=2, checkpoint_table=CHECKPOINTS)
    assert isinstance(successor, SqlOutput)
    with after_first(deposed_url, "SELECT", deposed_commits):
        successor.open(half)
    assert outcome, "the new leader never read its checkpoint row"
    loaded = successor.committed_checkpoint()
    assert loaded is not None
    assert loaded.state == stored_state(target), (
        f"the new leader loaded seq {loaded.state.get('seq')}, but the row it claimed holds "
        f"{stored_state(target)} (deposed leader's commit: {outcome[0]})")
    assert outcome == ["RetryableOutputError"]  # it waited for the claim's lock
    with pytest.raises(LeadershipLost):
        deposed.flush_checkpoint(Checkpoint("contract", 1, last))
    assert stored_state(target) == first


@pytest.fixture
def pg_target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlTarget]:
    infos: dict[TableId, TableInfo] = {t: int_info(t) for t in TABLES}
    for made in target_fixture("postgres", request, tmp_path, infos.get):
        assert isinstance(made, SqlTarget)
        yield made


def test_two_new_leaders_that_both_find_no_row_end_with_the_newer_one_holding_it(
        pg_target: SqlTarget) -> None:
    """PostgreSQL locks no row that is not there: a deposed leader's first claim can insert
    the checkpoint row between the new leader's update (no row) and its insert; the new
    leader then claims that row instead of failing on the key."""
    target = pg_target
    deposed_url = impatient(target.url)
    deposed = target.new_output(epoch=1, url=deposed_url, checkpoint_table=CHECKPOINTS)
    outcome: list[str] = []

    def deposed_claims() -> None:
        deposed.open(0)
        outcome.append("claimed")

    successor = target.new_output(epoch=2, checkpoint_table=CHECKPOINTS)
    with after_first(deposed_url, "UPDATE", deposed_claims):
        successor.open(0)
    assert outcome == ["claimed"]
    with target.engine.connect() as conn:
        epochs = conn.execute(sa.text(f"SELECT epoch FROM {CHECKPOINTS}")).scalars().all()
    assert epochs == [2]
    with pytest.raises(LeadershipLost):
        deposed.flush_checkpoint(Checkpoint("contract", 1, {"seq": 0, "dumps": [],
                                                            "position": None}))
