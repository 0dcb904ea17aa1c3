"""What ``dblog status`` reads from the state store itself: the committed state, and with
ZooKeeper the leader and epochs; it is shown even when no instance runs."""

from __future__ import annotations

from typing import Any

from dblog.app.config import PipelineConfig
from dblog.errors import DblogError, RetryableStateError
from dblog.state import FileStateStore, state_from_json


def stored_status(config: PipelineConfig) -> dict[str, Any]:
    if config.state.type == "zookeeper":
        from dblog.ha.status import ha_status

        try:
            return ha_status(config)
        except RetryableStateError as exc:
            return {"state_store": f"unreachable: {exc.message}"}
        except DblogError as exc:  # a damaged state znode, missing ACL rights: with the fix
            return {"state_store": f"error: {exc.message}", "fix": exc.fix}
    stored = FileStateStore(config.state.path).load()
    if stored is None:
        return {"committed_position": None, "note": f"no state at {config.state.path}"}
    state = state_from_json(stored.data)
    return {
        "version": stored.version,
        "committed_position": None if state.position is None else str(state.position),
        "committed_seq": state.seq,
        "dumps": [{"id": d.id, "state": d.state.value, "rows": d.rows, "chunks": d.chunks,
                   "error": d.error} for d in state.dumps.dumps if not d.internal],
    }
