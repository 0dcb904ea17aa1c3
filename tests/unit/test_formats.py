"""The fast native line must equal the reference encoding byte for byte."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from dblog.connectors.postgres.positions import Lsn
from dblog.core.model import ChangeEvent, EncodedRow, Op, TableId
from dblog.formats.native import NativeFormat
from dblog.formats.native import native_document as native

values = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=20),
                   st.booleans(), st.floats(allow_nan=False, allow_infinity=False))
rows = st.dictionaries(st.text(min_size=1, max_size=8), values, max_size=6)


@st.composite
def events(draw: st.DrawFn) -> ChangeEvent:
    op = draw(st.sampled_from([Op.INSERT, Op.UPDATE, Op.DELETE, Op.READ, Op.TRUNCATE,
                               Op.BEGIN, Op.COMMIT]))
    table = draw(st.one_of(st.none(), st.builds(TableId, st.text(max_size=6),
                                                st.text(max_size=6))))
    after = draw(st.one_of(st.none(), rows, rows.map(lambda r: EncodedRow(orjson.dumps(r)
                                                                          .decode()))))
    position = draw(st.one_of(st.none(), st.integers(0, 2**64 - 1).map(Lsn)))
    return ChangeEvent(
        op, table,
        key=draw(st.one_of(st.none(), st.tuples(values), st.tuples(values, values))),
        before=draw(st.one_of(st.none(), rows)), after=after, position=position,
        txid=draw(st.one_of(st.none(), st.integers(0, 2**32))),
        commit_ts=draw(st.one_of(st.none(), st.text(max_size=30))),
        old_key=draw(st.one_of(st.none(), st.tuples(values))),
        unchanged=draw(st.sampled_from([(), ("big",)])),
        dump_id=draw(st.one_of(st.none(), st.just("d1"))),
        seq=draw(st.integers(0, 2**40)),
    )


@settings(max_examples=400)
@given(events())
def test_native_line_equals_the_reference_encoding(event: ChangeEvent) -> None:
    expected = orjson.dumps(native(event), option=orjson.OPT_APPEND_NEWLINE)
    assert NativeFormat().line(event) == expected


def test_the_common_log_row_shape_takes_the_fast_path_and_matches() -> None:
    event = ChangeEvent(Op.UPDATE, TableId("public", 'we"ird'), (7,), None,
                        {"id": 7, "note": "a\nb", "amount": "1.50"}, Lsn((0x16 << 32) | 0xB3),
                        726, "2026-11-21 17:19:06.385371+00", seq=41)
    line = NativeFormat().line(event)
    assert line == orjson.dumps(native(event), option=orjson.OPT_APPEND_NEWLINE)
    assert orjson.loads(line)["pos"] == "16/B3"


@settings(max_examples=300)
@given(st.sampled_from([Op.INSERT, Op.UPDATE, Op.DELETE]), st.one_of(st.none(), rows), rows,
       st.tuples(values), st.integers(0, 2**64 - 1), st.integers(0, 2**32), st.text(max_size=30))
def test_log_rows_with_and_without_a_before_image_match_the_reference(
        op: Op, before: dict[str, object] | None, after: dict[str, object],
        key: tuple[object, ...], lsn: int, txid: int, ts: str) -> None:
    event = ChangeEvent(op, TableId("s", "t"), key, before, after, Lsn(lsn), txid, ts, seq=3)
    assert NativeFormat().line(event) == orjson.dumps(native(event),
                                                      option=orjson.OPT_APPEND_NEWLINE)


def _dump_row(row: dict[str, object], as_bytes: bool, table: TableId, position: Lsn | None,
              seq: int, dump_id: str | None) -> ChangeEvent:
    encoded = orjson.dumps(row)
    return ChangeEvent(Op.READ, table, (seq,), None,
                       EncodedRow(encoded if as_bytes else encoded.decode()), position,
                       dump_id=dump_id, seq=seq)


@settings(max_examples=200)
@given(st.lists(st.one_of(events(), st.builds(
    _dump_row, rows, st.booleans(), st.builds(TableId, st.text(max_size=6), st.text(max_size=6)),
    st.one_of(st.none(), st.integers(0, 2**64 - 1).map(Lsn)), st.integers(0, 2**40),
    st.one_of(st.none(), st.just("d1")))), max_size=12))
def test_jsonl_lines_decode_to_the_native_documents_in_order(batch: list[ChangeEvent]) -> None:
    """The native format's batch encoding (dump rows encoded together, their row embedded as
    is) gives, line by line, the documents of the reference encoding."""
    data = NativeFormat().encode_lines(batch)
    assert data.count(b"\n") == len(batch) and (not batch or data.endswith(b"\n"))
    assert [orjson.loads(line) for line in data.splitlines()] == \
        [orjson.loads(orjson.dumps(native(e, decoded=True))) for e in batch]


@st.composite
def chunks(draw: st.DrawFn) -> list[ChangeEvent]:
    """A chunk's rows as a dump emits them: one table, one position and one dump id shared by
    every row (the run the batch encoding takes at once), with other events in between."""
    table = TableId("public", draw(st.text(max_size=6)))
    position = draw(st.one_of(st.none(), st.integers(0, 2**64 - 1).map(Lsn)))
    dump_id = draw(st.one_of(st.none(), st.just("d1")))
    batch: list[ChangeEvent] = []
    for seq in range(draw(st.integers(0, 20))):
        if draw(st.integers(0, 9)) == 0:
            batch.append(draw(events()))
            continue
        row = draw(rows)
        after = row if draw(st.booleans()) else EncodedRow(orjson.dumps(row))
        batch.append(ChangeEvent(Op.READ, table, (seq,), None, after, position,
                                 dump_id=dump_id, seq=seq))
    return batch


@settings(max_examples=200)
@given(chunks())
def test_a_chunks_rows_encode_to_the_native_documents_with_the_native_field_order(
        batch: list[ChangeEvent]) -> None:
    data = NativeFormat().encode_lines(batch)
    assert data.count(b"\n") == len(batch)
    got = [orjson.loads(line) for line in data.splitlines()]
    expected = [orjson.loads(orjson.dumps(native(e, decoded=True))) for e in batch]
    assert got == expected
    assert [list(doc) for doc in got] == [list(doc) for doc in expected]


def test_encoded_rows_equal_as_rows_hash_alike() -> None:
    as_text = EncodedRow('{"b": 2, "a": "x"}')
    as_bytes = EncodedRow(b'{"a":"x","b":2}')
    assert as_text == as_bytes and hash(as_text) == hash(as_bytes)
    assert as_text != EncodedRow(b'{"a":"x","b":3}')
    assert as_bytes.decode() == {"a": "x", "b": 2}
