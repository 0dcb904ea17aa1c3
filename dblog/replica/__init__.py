"""Replica tables that stay equal to the source: the pure apply core shared by the SQL, Delta
and Spark outputs (no driver here). See docs/replica.md.

* :mod:`dblog.replica.guard`: the position guard per source and why it is sound;
* :mod:`dblog.replica.reduce`: a batch reduced to the last change per key (tombstones, kept
  TOAST columns, truncate barriers);
* :mod:`dblog.replica.apply`: guards assigned across batches, and the plan a writer executes;
* :mod:`dblog.replica.memory`: that plan executed on dicts (the reference for writers);
* :mod:`dblog.replica.buffer`, :mod:`dblog.replica.progress`, :mod:`dblog.replica.purge`,
  :mod:`dblog.replica.kept`: the parts of a writer that do not depend on its target (the
  buffered events and when they commit, the last commit's progress, the tombstone purge's
  schedule, kept columns filled from stored rows).
"""

from .apply import ApplyState, OpenTxn, Plan, plan_batch
from .buffer import CommitBuffer
from .guard import (
    BINLOG,
    LIMIT,
    MARIADB_GTID,
    MAX_MINOR,
    MYSQL_GTID,
    POSTGRES,
    POSTGRES_AT_COMMIT,
    Guard,
    GuardScheme,
    MajorFrom,
    purge_bound,
    register_scheme,
    scheme_for,
)
from .kept import LeftOut
from .memory import MemoryReplica, StoredRow
from .progress import Commit, ReplicaProgress
from .purge import PurgeSchedule
from .reduce import RowChange, TablePlan, decoded_rows

__all__ = [
    "BINLOG", "LIMIT", "MARIADB_GTID", "MAX_MINOR", "MYSQL_GTID", "POSTGRES",
    "POSTGRES_AT_COMMIT",
    "ApplyState", "Commit", "CommitBuffer", "Guard", "GuardScheme", "LeftOut", "MajorFrom",
    "MemoryReplica", "OpenTxn", "Plan", "PurgeSchedule", "ReplicaProgress", "RowChange",
    "StoredRow", "TablePlan", "decoded_rows", "plan_batch", "purge_bound", "register_scheme",
    "scheme_for",
]
