"""Replica tables that stay equal to the source: the pure apply core shared by the SQL, Delta
and Spark outputs (no driver here). See docs/replica.md.

* :mod:`dblog.replica.guard`: the position guard per source and why it is sound;
* :mod:`dblog.replica.reduce`: a batch reduced to the last change per key (tombstones, kept
  TOAST columns, truncate barriers);
* :mod:`dblog.replica.apply`: guards assigned across batches, and the plan a writer executes;
* :mod:`dblog.replica.memory`: that plan executed on dicts (the reference for writers).
"""

from .apply import ApplyState, OpenTxn, Plan, plan_batch
from .guard import (
    BINLOG,
    LIMIT,
    MARIADB_GTID,
    MAX_MINOR,
    MYSQL_GTID,
    POSTGRES,
    POSTGRES_COMMIT_ON_BEGIN,
    Guard,
    GuardScheme,
    MajorFrom,
    purge_bound,
    register_scheme,
    scheme_for,
)
from .memory import MemoryReplica, StoredRow
from .reduce import RowChange, TablePlan

__all__ = [
    "BINLOG", "LIMIT", "MARIADB_GTID", "MAX_MINOR", "MYSQL_GTID", "POSTGRES",
    "POSTGRES_COMMIT_ON_BEGIN",
    "ApplyState", "Guard", "GuardScheme", "MajorFrom", "MemoryReplica", "OpenTxn", "Plan",
    "RowChange", "StoredRow", "TablePlan", "plan_batch", "purge_bound", "register_scheme",
    "scheme_for",
]
