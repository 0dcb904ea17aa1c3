"""Keys touched by recently emitted transactions (pure, bounded).

A chunk SELECT reports the transactions still in progress for its snapshot. PostgreSQL can log a
commit and make it visible much later (synchronous replication waits in between), so such a
transaction may already have been forwarded before the low watermark was written. Its changes are
newer than the chunk's rows for the same keys, so those rows must be dropped; this index says
which keys that is, and whether the forwarded image was partial (unchanged TOAST columns), in
which case the key must be read again. A transaction that truncated a table, touched too many
keys, or was pushed out of the index answers UNKNOWN: the chunk is discarded and read again.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Literal

from dblog.core.model import Key, TableId

UNKNOWN: Literal["unknown"] = "unknown"
TRUNCATED_OR_ALTERED = "truncated or altered a table"
TOO_MANY_KEYS = "changed more rows than the index keeps per transaction"
PUSHED_OUT = "was pushed out of the index by newer transactions (raise engine.recent_keys)"
TableKey = tuple[str, str, Key, bool]
"""(schema, table, key, partial): plain values only, so the garbage collector stops tracking
them. ``partial``: the forwarded after-image lacked unchanged TOAST columns."""
Touched = set[TableKey] | Literal["unknown"]


class RecentTransactions:
    def __init__(self, max_keys: int = 50_000, max_keys_per_tx: int = 10_000,
                 max_evicted: int = 100_000) -> None:
        self.max_keys = max_keys
        self.max_keys_per_tx = max_keys_per_tx
        # per transaction, the keys it touched in order (a key changed twice counts twice: an
        # append is cheaper than a set insert on the stream's hot path; the bounds still hold)
        self._txs: OrderedDict[int, list[TableKey] | str] = OrderedDict()
        """Keys per transaction, or why they are unknown (one of the texts below)."""
        self._size = 0
        self._evicted: deque[int] = deque(maxlen=max_evicted)
        self._evicted_set: set[int] = set()
        self.evicted = 0
        self._current: tuple[int, list[TableKey]] | None = None

    def add(self, txid: int, table: TableId, key: Key | None, partial: bool = False) -> None:
        """Record a row change; ``key=None`` (a truncate or schema change) marks the whole
        transaction as unknown."""
        current = self._current
        if current is None or current[0] != txid:
            found = self._txs.get(txid)
            if isinstance(found, str):
                return
            if found is None:
                found = self._txs[txid] = []
            current = self._current = (txid, found)
        keys = current[1]
        if key is None or len(keys) >= self.max_keys_per_tx:
            self._size -= len(keys)
            self._txs[txid] = TRUNCATED_OR_ALTERED if key is None else TOO_MANY_KEYS
            self._current = None
            return
        keys.append((table.schema, table.name, key, partial))
        self._size += 1
        if self._size > self.max_keys:
            while self._size > self.max_keys and len(self._txs) > 1:
                self._evict()

    def _evict(self) -> None:
        txid, dropped = self._txs.popitem(last=False)
        if self._current is not None and self._current[0] == txid:
            self._current = None
        self._size -= 0 if isinstance(dropped, str) else len(dropped)
        if len(self._evicted) == self._evicted.maxlen:
            self._evicted_set.discard(self._evicted[0])
        self._evicted.append(txid)
        self._evicted_set.add(txid)
        self.evicted += 1

    def keys_of(self, txid: int) -> Touched | None:
        """What ``txid`` touched; UNKNOWN if it cannot be said (truncate, too many keys,
        pushed out of the index); None if it was not forwarded (as far as the index knows)."""
        if txid in self._evicted_set:
            return UNKNOWN
        keys = self._txs.get(txid)
        if isinstance(keys, str):
            return UNKNOWN
        return None if keys is None else set(keys)

    def why_unknown(self, txid: int) -> str:
        """Why :meth:`keys_of` answers UNKNOWN for ``txid`` (for the discard message)."""
        if txid in self._evicted_set:
            return PUSHED_OUT
        found = self._txs.get(txid)
        return found if isinstance(found, str) else PUSHED_OUT
