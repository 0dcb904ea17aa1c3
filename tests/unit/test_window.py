"""Unit tests of the watermark window (SPEC section 2, steps 6 and 7)."""

from __future__ import annotations

from dblog.core.model import ChangeEvent, Op, TableId
from dblog.core.window import ChunkWindow, on_change, on_watermark, open_window, surviving_rows

T = TableId("public", "t")
OTHER = TableId("public", "other")


def chunk(*keys: int) -> list[tuple[tuple[int, ...], dict[str, int]]]:
    return [((k,), {"id": k, "v": 0}) for k in keys]


def window(*keys: int) -> ChunkWindow:
    return open_window(T, "L1", "H1", chunk(*keys))


def opened(*keys: int) -> ChunkWindow:
    w, closed = on_watermark(window(*keys), "L1")
    assert w.low_seen and not closed
    return w


def ev(op: Op, key: int | None = None, table: TableId = T, old_key: int | None = None,
       unchanged: tuple[str, ...] = ()) -> ChangeEvent:
    after = None if op in (Op.DELETE, Op.TRUNCATE, Op.SCHEMA) or key is None else {"id": key}
    return ChangeEvent(op, table, None if key is None else (key,), after=after,
                       old_key=None if old_key is None else (old_key,), unchanged=unchanged)


def keys_of(w: ChunkWindow) -> list[int]:
    return [k[0] for k, _ in surviving_rows(w)]


def test_open_window_keeps_rows_in_select_order_and_last_key() -> None:
    w = open_window(T, "L", "H", chunk(3, 5, 9))
    assert w.last_key == (9,)
    assert keys_of(w) == [3, 5, 9]
    assert surviving_rows(w)[1] == ((5,), {"id": 5, "v": 0})
    assert not w.low_seen and not w.discarded and w.dropped == 0 and w.refetch == frozenset()


def test_open_window_on_empty_chunk() -> None:
    w = open_window(T, "L", "H", [])
    assert w.last_key is None
    assert surviving_rows(w) == []


def test_events_before_low_watermark_do_not_drop_rows() -> None:
    w = window(1, 2, 3)
    for event in (ev(Op.UPDATE, 1), ev(Op.DELETE, 2), ev(Op.INSERT, 3), ev(Op.TRUNCATE)):
        w = on_change(w, event)
    assert keys_of(w) == [1, 2, 3]
    assert w.dropped == 0 and not w.discarded
    w, closed = on_watermark(w, "L1")
    w, closed = on_watermark(w, "H1")
    assert closed
    assert keys_of(w) == [1, 2, 3]


def test_events_between_low_and_high_drop_rows_with_equal_key() -> None:
    w = opened(1, 2, 3, 4)
    w = on_change(w, ev(Op.UPDATE, 2))
    w = on_change(w, ev(Op.DELETE, 4))
    w = on_change(w, ev(Op.INSERT, 7))  # not in the chunk: nothing to drop
    assert keys_of(w) == [1, 3]
    assert w.dropped == 2
    w, closed = on_watermark(w, "H1")
    assert closed
    assert keys_of(w) == [1, 3]
    assert surviving_rows(w) == [((1,), {"id": 1, "v": 0}), ((3,), {"id": 3, "v": 0})]


def test_every_row_operation_drops_including_read() -> None:
    for op in (Op.INSERT, Op.UPDATE, Op.DELETE, Op.READ):
        w = on_change(opened(1, 2), ev(op, 1))
        assert keys_of(w) == [2], op


def test_second_event_for_a_dropped_key_does_not_count_twice() -> None:
    w = on_change(on_change(opened(1, 2), ev(Op.UPDATE, 1)), ev(Op.DELETE, 1))
    assert keys_of(w) == [2]
    assert w.dropped == 1


def test_key_changing_update_drops_old_and_new_key() -> None:
    w = on_change(opened(1, 2, 3, 4), ev(Op.UPDATE, 3, old_key=1))
    assert keys_of(w) == [2, 4]
    assert w.dropped == 2


def test_key_changing_update_to_a_key_outside_the_chunk_drops_the_old_key() -> None:
    w = on_change(opened(1, 2), ev(Op.UPDATE, 50, old_key=2))
    assert keys_of(w) == [1]
    w = on_change(opened(1, 2), ev(Op.UPDATE, 2, old_key=50))
    assert keys_of(w) == [1]


def test_truncate_inside_the_window_discards_the_chunk() -> None:
    w = on_change(opened(1, 2, 3), ev(Op.TRUNCATE))
    assert w.discarded
    assert surviving_rows(w) == []
    assert w.dropped == 3
    # later events do not resurrect anything and the window still closes at H
    w = on_change(w, ev(Op.INSERT, 1))
    assert surviving_rows(w) == [] and w.discarded
    w, closed = on_watermark(w, "H1")
    assert closed and w.discarded


def test_schema_change_inside_the_window_discards_the_chunk() -> None:
    w = on_change(opened(1, 2), ev(Op.SCHEMA))
    assert w.discarded
    assert surviving_rows(w) == []


def test_truncate_of_another_table_is_ignored() -> None:
    w = on_change(opened(1, 2), ev(Op.TRUNCATE, table=OTHER))
    assert not w.discarded
    assert keys_of(w) == [1, 2]


def test_events_of_other_tables_leave_the_window_untouched() -> None:
    w = opened(1, 2, 3)
    for event in (ev(Op.UPDATE, 1, table=OTHER), ev(Op.DELETE, 2, table=OTHER),
                  ev(Op.UPDATE, 3, table=OTHER, old_key=1), ev(Op.SCHEMA, table=OTHER),
                  ev(Op.INSERT, 3, table=TableId("other_schema", "t"))):
        w = on_change(w, event)
    assert keys_of(w) == [1, 2, 3]
    assert w.dropped == 0


def test_transaction_markers_do_not_drop() -> None:
    w = opened(1)
    w = on_change(w, ChangeEvent(Op.BEGIN, None, txid=1))
    w = on_change(w, ChangeEvent(Op.COMMIT, None, txid=1))
    assert keys_of(w) == [1]


def test_high_before_low_does_not_close() -> None:
    w = window(1, 2)
    w, closed = on_watermark(w, "H1")
    assert not closed
    assert not w.low_seen
    # the log event after the stray H is still before L: no drop
    w = on_change(w, ev(Op.DELETE, 1))
    assert keys_of(w) == [1, 2]
    w, closed = on_watermark(w, "L1")
    assert not closed
    w = on_change(w, ev(Op.DELETE, 2))
    w, closed = on_watermark(w, "H1")
    assert closed
    assert keys_of(w) == [1]


def test_foreign_watermarks_are_ignored() -> None:
    w = window(1)
    w, closed = on_watermark(w, "L-other")
    assert not closed and not w.low_seen
    w, closed = on_watermark(w, "L1")
    w, closed = on_watermark(w, "hb-123")
    assert not closed and w.low_seen
    w, closed = on_watermark(w, "H-other")
    assert not closed


def test_partial_event_that_evicts_a_row_requests_a_refetch() -> None:
    w = on_change(opened(1, 2, 3), ev(Op.UPDATE, 2, unchanged=("blob",)))
    assert keys_of(w) == [1, 3]
    assert w.refetch == frozenset({(2,)})
    # a complete event for another key does not add to refetch
    w = on_change(w, ev(Op.UPDATE, 3))
    assert w.refetch == frozenset({(2,)})
    assert keys_of(w) == [1]


def test_partial_event_that_evicts_nothing_requests_no_refetch() -> None:
    w = on_change(opened(1, 2), ev(Op.UPDATE, 9, unchanged=("blob",)))
    assert w.refetch == frozenset()
    w = on_change(window(1, 2), ev(Op.UPDATE, 1, unchanged=("blob",)))  # before L
    assert w.refetch == frozenset()
    assert keys_of(w) == [1, 2]
    w = on_change(opened(1, 2), ev(Op.UPDATE, 1, table=OTHER, unchanged=("blob",)))
    assert w.refetch == frozenset()


def test_partial_key_change_refetches_the_new_key_only() -> None:
    w = on_change(opened(1, 2, 3), ev(Op.UPDATE, 3, old_key=1, unchanged=("blob",)))
    assert keys_of(w) == [2]
    assert w.refetch == frozenset({(3,)})


def test_partial_key_change_from_a_chunk_key_refetches_the_new_key() -> None:
    # the old key held the chunk's whole row; the event under the new key lacks the TOAST
    # column, so the new key is read again even though the chunk never held it
    w = on_change(opened(1, 2, 3), ev(Op.UPDATE, 100, old_key=1, unchanged=("blob",)))
    assert keys_of(w) == [2, 3]
    assert w.refetch == frozenset({(100,)})


def test_window_functions_do_not_mutate_their_input() -> None:
    before = opened(1, 2)
    after = on_change(before, ev(Op.DELETE, 1))
    assert keys_of(before) == [1, 2]
    assert keys_of(after) == [2]
    rows = chunk(1, 2)
    w = open_window(T, "L", "H", rows)
    rows.append(((3,), {"id": 3}))
    assert keys_of(w) == [1, 2]


def test_events_of_pending_transactions_evict_before_low() -> None:
    """A transaction logged before L but invisible to the SELECT's snapshot evicts rows."""
    w = open_window(T, "L1", "H1", chunk(1, 2, 3), pending_txids=frozenset({7}))
    assert w.pending_txids == frozenset({7})
    pending = ev(Op.UPDATE, 1)
    pending.txid = 7
    visible = ev(Op.UPDATE, 2)
    visible.txid = 6
    w = on_change(on_change(w, pending), visible)
    assert keys_of(w) == [2, 3]
    assert w.dropped == 1
    truncate = ev(Op.TRUNCATE)
    truncate.txid = 7
    w = on_change(w, truncate)
    assert w.discarded and surviving_rows(w) == []


def test_pending_transactions_of_another_table_do_not_evict() -> None:
    w = open_window(T, "L1", "H1", chunk(1), pending_txids=frozenset({7}))
    event = ev(Op.DELETE, 1, table=OTHER)
    event.txid = 7
    assert keys_of(on_change(w, event)) == [1]


def test_a_schema_change_discards_the_chunk_even_before_the_low_watermark() -> None:
    # the SELECT may have run after the DDL with the columns known before it
    w = on_change(window(1, 2, 3), ev(Op.SCHEMA))
    assert w.discarded and keys_of(w) == []
