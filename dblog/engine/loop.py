"""Log forwarding (steps 1, 5 and 6 of the algorithm as seen from the log): each log item goes
to the chunk windows and then to delivery, with transaction boundaries kept.

* :class:`TransactionBoundary` knows where the stream last stood between two transactions:
  the state must never pair a sequence number inside a transaction with a position before
  it, so dump progress is recorded there (:meth:`TransactionBoundary.record_progress`).
* :class:`LogForwarder` handles one log item: a watermark goes to the windows only; a change
  goes to the windows (the drop rule) while one is open or chunks wait ahead, is indexed for
  the snapshot guard, and is emitted after its transaction's BEGIN. A BEGIN is held back until
  the transaction emits something, so transactions that touch only the watermark table leave
  no trace in the stream.

Both are built from a delivery and the window side (:class:`Windows`), with no log reader.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from dblog.core.dumps import Dump
from dblog.core.model import TABLE_OPS, ChangeEvent, LogItem, Op, TableId, Watermark
from dblog.core.positions import Position
from dblog.core.recent import RecentTransactions


class Marks(Protocol):
    """What the boundary needs from delivery (:class:`dblog.engine.delivery.Delivery`)."""

    last_seq: int

    def emit(self, event: ChangeEvent) -> None: ...

    def mark(self, position: Position | None, dump: Dump | None = None,
             seq: int | None = None) -> None: ...


class Windows(Protocol):
    """What forwarding needs from the dump side (:class:`dblog.engine.scheduler.DumpScheduler`)."""

    def windowing(self) -> bool: ...

    def on_change(self, item: ChangeEvent) -> None: ...

    def on_watermark(self, mark: Watermark) -> None: ...


class TransactionBoundary:
    def __init__(self, delivery: Marks, position: Position | None, seq: int) -> None:
        self.delivery = delivery
        self.position = position
        """The position of the last commit forwarded (or the committed state's)."""
        self.seq = seq
        """The last sequence number emitted before that commit."""
        self.inside = False
        """Whether the current transaction has emitted anything yet."""

    def commit(self, position: Position | None) -> None:
        self.inside = False
        self.position, self.seq = position, self.delivery.last_seq
        self.delivery.mark(position)

    def record_progress(self, dump: Dump) -> None:
        """A commit point for ``dump``'s progress at the last transaction boundary."""
        if self.inside:
            self.delivery.mark(self.position, dump, seq=self.seq)
        else:
            self.seq = self.delivery.last_seq
            self.delivery.mark(self.position, dump)


class LogForwarder:
    def __init__(self, delivery: Marks, windows: Windows, boundary: TransactionBoundary,
                 recent: RecentTransactions) -> None:
        self.delivery, self.windows, self.boundary, self.recent = (
            delivery, windows, boundary, recent)
        self._begin: ChangeEvent | None = None
        self.schema_changed: Callable[[TableId], None] = lambda table: None
        """Told of each schema change (the table catalog of the outputs reads it again)."""

    def process(self, item: LogItem) -> None:
        """One log item (the per-event path: one call, no helper, locals for what it uses)."""
        if isinstance(item, Watermark):
            self.windows.on_watermark(item)
            return
        op, delivery, boundary = item.op, self.delivery, self.boundary
        if op is Op.BEGIN:
            self._begin, boundary.inside = item, False
            return
        if op is Op.COMMIT:
            if boundary.inside:
                delivery.emit(item)
            self._begin = None
            boundary.commit(item.position)
            return
        if self.windows.windowing():
            self.windows.on_change(item)
        table = item.table
        if op is Op.SCHEMA and table is not None:
            self.schema_changed(table)
        if item.txid is not None and table is not None:
            self.recent.add(item.txid, table, None if op in TABLE_OPS else item.key,
                            bool(item.unchanged))
            if item.old_key is not None:
                self.recent.add(item.txid, table, item.old_key)
        if not boundary.inside and self._begin is not None:
            delivery.emit(self._begin)
            boundary.inside = True
        delivery.emit(item)
