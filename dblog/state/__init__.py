"""State: the JSON codec of the pipeline state, the compare-and-set rule, and the local-file
store (the ZooKeeper store lives with the HA code in :mod:`dblog.ha.zk`)."""

from dblog.state.codec import check_fence, state_from_json, state_to_json
from dblog.state.file import FileStateStore

__all__ = ["FileStateStore", "check_fence", "state_from_json", "state_to_json"]
