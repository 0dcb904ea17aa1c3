"""The sink checkpoint of the SQL output: one row per pipeline in ``dblog_checkpoint`` (name
configurable), written in the same transaction as the replica rows.

The row holds the leader epoch, the pipeline state of the last commit (seq, position, the
whole state as JSON for the engine to adopt), and what the apply core needs after a restart
(the guard scheme's name and the truncate barriers).

Fencing by the target itself: every flush transaction starts with
``UPDATE dblog_checkpoint SET epoch = :epoch, ... WHERE pipeline = :p AND epoch <= :epoch``.
It takes the row's lock first, so writers of one pipeline are serialized; a deposed leader's
update matches no row once its successor's epoch is stored (PostgreSQL and InnoDB re-read the
row after waiting for the lock; SQLite writers hold the database lock), and the output
then rolls back its transaction and stops: nothing it wrote is committed. A new leader claims
the row when it opens, before its first flush, so a frozen leader resumed after a takeover is
refused even if its successor has not written yet; the claim reads the row it locked, in the
same transaction (:func:`claim`), so the new leader starts from exactly the state it fenced.
``flushes`` grows with every commit, so the update always changes the row (MySQL counts
changed rows unless FOUND_ROWS is set).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dblog.core.model import TableId
from dblog.errors import LeadershipLost
from dblog.replica import Guard
from dblog.spi import Checkpoint


@dataclass
class StoredCheckpoint:
    epoch: int
    seq: int
    state: dict[str, Any] | None
    scheme: str | None
    barriers: dict[TableId, Guard] = field(default_factory=dict)

    def checkpoint(self, pipeline: str) -> Checkpoint | None:
        """The engine's checkpoint in the row, as ``pipeline`` committed it (None: none yet)."""
        return None if self.state is None else Checkpoint(pipeline, self.epoch, self.state)


def checkpoint_table(name: str, schema: str | None) -> sa.Table:
    return sa.Table(
        name, sa.MetaData(),
        sa.Column("pipeline", sa.String(200), primary_key=True, autoincrement=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("position", sa.Text(), nullable=True),
        sa.Column("state", sa.Text(), nullable=True),
        sa.Column("scheme", sa.String(100), nullable=True),
        sa.Column("barriers", sa.Text(), nullable=False),
        sa.Column("flushes", sa.BigInteger(), nullable=False),
        schema=schema)


def encode_barriers(barriers: dict[TableId, Guard]) -> str:
    return orjson.dumps([[t.schema, t.name, g.major, g.minor]
                         for t, g in sorted(barriers.items())]).decode()


def decode_barriers(text: str) -> dict[TableId, Guard]:
    return {TableId(s, n): Guard(major, minor) for s, n, major, minor in orjson.loads(text)}


def _stored(row: Any) -> StoredCheckpoint:
    state = orjson.loads(row["state"]) if row["state"] else None
    return StoredCheckpoint(int(row["epoch"]), int(row["seq"]), state, row["scheme"],
                            decode_barriers(row["barriers"]))


def claim(engine: Engine, table: sa.Table, pipeline: str, epoch: int
          ) -> StoredCheckpoint | None:
    """Claim the pipeline's row for ``epoch`` and return what it held (None: no row yet, one
    is created), in **one transaction** that locks the row before reading it, so what the
    new leader loads is exactly the row it fenced: a deposed leader's commit either landed
    before the lock was taken (and is read) or waits for this transaction and is then refused
    by its fence. Loading first and claiming in a second transaction left a window between
    the two in which a deposed leader's commit was neither read nor refused.

    The lock: a write to the row first (PostgreSQL and InnoDB lock the row, and re-read it
    after waiting for a lock held by another writer; SQLite takes the database's write lock),
    then a locking read of the row (``FOR UPDATE`` where the dialect has it), then the fence.
    Raises :class:`LeadershipLost` when a newer epoch holds the row (nothing is changed).

    Two leaders that find no row may both insert one (PostgreSQL locks no row that is not
    there): the second insert fails on the key, and that leader claims the row the first
    created, as it would have had it come a moment later."""
    try:
        return _claim_once(engine, table, pipeline, epoch)
    except sa.exc.IntegrityError:
        return _claim_once(engine, table, pipeline, epoch)


def _claim_once(engine: Engine, table: sa.Table, pipeline: str, epoch: int
                ) -> StoredCheckpoint | None:
    with engine.begin() as conn:
        locked = conn.execute(table.update().where(table.c.pipeline == pipeline)
                              .values(flushes=table.c.flushes + 1))
        if locked.rowcount != 1:
            conn.execute(table.insert().values(pipeline=pipeline, epoch=epoch, seq=0,
                                               barriers="[]", flushes=0))
            return None
        row = conn.execute(sa.select(table).where(table.c.pipeline == pipeline)
                           .with_for_update()).mappings().one()
        fence(conn, table, pipeline, epoch, {})  # raises for a newer epoch: rolled back
        return _stored(row)


def fence(conn: Connection, table: sa.Table, pipeline: str, epoch: int,
          values: dict[str, Any]) -> None:
    """The first statement of every flush transaction (see the module docstring)."""
    result = conn.execute(
        table.update().where(table.c.pipeline == pipeline, table.c.epoch <= epoch)
        .values(epoch=epoch, flushes=table.c.flushes + 1, **values))
    if result.rowcount != 1:
        raise LeadershipLost(
            f"the target refused the commit of pipeline {pipeline!r} at epoch {epoch}: a "
            "newer leader epoch committed there (this instance was deposed)")


def checkpoint_values(seq: int | None, state: dict[str, Any] | None, position: str | None,
                      scheme: str | None, barriers: dict[TableId, Guard]) -> dict[str, Any]:
    """The columns a flush sets besides the epoch (``seq`` None: keep the stored state)."""
    values: dict[str, Any] = {"barriers": encode_barriers(barriers)}
    if scheme is not None:
        values["scheme"] = scheme
    if seq is not None:
        values.update(seq=seq, position=position,
                      state=None if state is None else orjson.dumps(state).decode())
    return values
