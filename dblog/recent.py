"""Keys touched by recently emitted transactions (pure, bounded).

A chunk SELECT reports the transactions still in progress for its snapshot. PostgreSQL can log a
commit and make it visible much later (synchronous replication waits in between), so such a
transaction may already have been forwarded before the low watermark was written. Its changes are
newer than the chunk's rows for the same keys, so those rows must be dropped; this index says
which keys that is. It keeps the most recent transactions up to ``max_keys`` keys in all.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Literal

from dblog.model import Key, TableId

TOO_LARGE: Literal["too-large"] = "too-large"
TableKey = tuple[str, str, Key]
"""(schema, table, key): plain values only, so the garbage collector stops tracking them."""


class RecentTransactions:
    def __init__(self, max_keys: int = 50_000, max_keys_per_tx: int = 10_000) -> None:
        self.max_keys = max_keys
        self.max_keys_per_tx = max_keys_per_tx
        self._txs: OrderedDict[int, set[TableKey] | Literal["too-large"]] = OrderedDict()
        self._size = 0
        self.evicted = 0

    def add(self, txid: int, table: TableId, key: Key | None) -> None:
        if key is None:
            return
        keys = self._txs.get(txid)
        if keys is None:
            keys = self._txs[txid] = set()
        if isinstance(keys, str):  # TOO_LARGE
            return
        if len(keys) >= self.max_keys_per_tx:
            self._size -= len(keys)
            self._txs[txid] = TOO_LARGE
            return
        before = len(keys)
        keys.add((table.schema, table.name, key))
        self._size += len(keys) - before
        while self._size > self.max_keys and len(self._txs) > 1:
            _, dropped = self._txs.popitem(last=False)
            self._size -= 0 if isinstance(dropped, str) else len(dropped)
            self.evicted += 1

    def keys_of(self, txid: int) -> set[TableKey] | Literal["too-large"] | None:
        """The keys ``txid`` touched, TOO_LARGE if it touched too many to keep, None if unseen."""
        return self._txs.get(txid)
