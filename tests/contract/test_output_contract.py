"""The Output contract (dblog.spi.Output), run against every implementation.

open(committed_seq) -> write(batches) -> flush() returns the highest durable seq; reopening
with a lower committed seq drops what was beyond it, so a restart continues exactly from the
committed state.

Replica outputs (sql on SQLite, PostgreSQL and MariaDB; delta) keep tables, not an event log:
their contract, the same suite shape with replays instead of cuts, is
tests/contract/test_replica_output_contract.py; the test below checks they are Outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from dblog.connectors.postgres.positions import Lsn
from dblog.core.model import ChangeEvent, Op, TableId
from dblog.formats.native import native_document as native
from dblog.outputs.jsonl import JsonlOutput
from dblog.spi import Output
from dblog.testing import ListOutput

T = TableId("public", "orders")


def plain(value: Any) -> Any:
    """The JSON shape of a value: tuples become lists."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def make_events(first: int, last: int, tag: str = "a") -> list[ChangeEvent]:
    """Events with seq first..last covering every operation and optional field."""
    events: list[ChangeEvent] = []
    for seq in range(first, last + 1):
        kind = seq % 7
        if kind == 0:
            event = ChangeEvent(Op.BEGIN, None, position=Lsn(seq), txid=seq)
        elif kind == 1:
            event = ChangeEvent(Op.INSERT, T, (seq,), after={"id": seq, "tag": tag, "n": None},
                                position=Lsn(seq), txid=seq, commit_ts="2024-01-02T03:04:05Z")
        elif kind == 2:
            event = ChangeEvent(Op.UPDATE, T, (seq, "k"), before={"id": seq - 1},
                                after={"id": seq, "tag": f"{tag}-ü✓", "f": 1.5},
                                old_key=(seq - 1, "k"), unchanged=("blob",),
                                position=Lsn(seq << 32), txid=seq)
        elif kind == 3:
            event = ChangeEvent(Op.DELETE, T, (seq,), before={"id": seq, "tag": tag},
                                position=Lsn(seq), txid=seq)
        elif kind == 4:
            event = ChangeEvent(Op.READ, T, (seq,), after={"id": seq, "tag": tag,
                                                           "nested": {"a": [1, 2]}},
                                position=Lsn(seq), dump_id="d1")
        elif kind == 5:
            event = ChangeEvent(Op.TRUNCATE, T, position=Lsn(seq), txid=seq)
        else:
            event = ChangeEvent(Op.COMMIT, None, position=Lsn(seq), txid=seq)
        event.seq = seq
        events.append(event)
    return events


class JsonlHarness:
    name = "jsonl"

    def __init__(self, tmp: Path) -> None:
        self.path = tmp / "out" / "changes.jsonl"
        self.current: JsonlOutput | None = None

    def new_output(self) -> Output:
        """A fresh instance over the same file, as after a process restart."""
        if self.current is not None:
            self.current.close()
        self.current = JsonlOutput({"path": str(self.path)})
        return self.current

    def contents(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        assert data == b"" or data.endswith(b"\n"), "the file ends with a torn line"
        return [orjson.loads(line) for line in data.splitlines()]


class ListHarness:
    name = "list"

    def __init__(self, tmp: Path) -> None:
        self.output = ListOutput()

    def new_output(self) -> Output:
        return self.output  # the list is the durable medium of this output

    def contents(self) -> list[dict[str, Any]]:
        return [as_json(e) for e in self.output.events]


HARNESSES = {"jsonl": JsonlHarness, "list": ListHarness}


@pytest.fixture(params=sorted(HARNESSES))
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    made = HARNESSES[request.param](tmp_path)
    yield made
    if isinstance(made, JsonlHarness) and made.current is not None:
        made.current.close()


def as_json(event: ChangeEvent) -> dict[str, Any]:
    """The native form as a JSON reader sees it (tuples are arrays, pre-encoded rows are
    objects)."""
    parsed: dict[str, Any] = orjson.loads(orjson.dumps(native(event)))
    return parsed


def expected(events: Sequence[ChangeEvent]) -> list[dict[str, Any]]:
    return [as_json(e) for e in events]


def seqs(rows: list[dict[str, Any]]) -> list[int]:
    return [r["seq"] for r in rows]


def test_the_output_has_a_name(harness: Any) -> None:
    output = harness.new_output()
    assert isinstance(output.name, str) and output.name
    assert isinstance(output, Output)


def test_replica_outputs_are_outputs(tmp_path: Path) -> None:
    from dblog.outputs.delta import DeltaOutput
    from dblog.outputs.sql import SqlOutput

    for output in (SqlOutput({"url": f"sqlite:///{tmp_path / 'r.db'}"}),
                   DeltaOutput({"path": str(tmp_path / "delta")})):
        assert isinstance(output, Output) and output.name
        output.open(5)
        assert output.flush() == 5  # the committed seq, as every output
        output.close()


def test_flush_returns_the_last_written_seq(harness: Any) -> None:
    output = harness.new_output()
    output.open(0)
    output.write(make_events(1, 3))
    assert output.flush() == 3
    output.write(make_events(4, 4))
    output.write(make_events(5, 9))
    assert output.flush() == 9
    assert output.flush() == 9  # idempotent
    assert seqs(harness.contents()) == list(range(1, 10))
    output.close()


def test_flush_right_after_open_acknowledges_the_committed_seq(harness: Any) -> None:
    """Everything up to the committed seq is durable already; an output opened on it must not
    acknowledge less, or the committed position could not advance while nothing is emitted."""
    output = harness.new_output()
    output.open(7)
    assert output.flush() == 7
    output.write(make_events(8, 9))
    assert output.flush() == 9
    output.close()


def test_events_round_trip(harness: Any) -> None:
    events = make_events(1, 21)
    output = harness.new_output()
    output.open(0)
    output.write(events[:10])
    output.write(events[10:])
    assert output.flush() == 21
    output.close()
    rows = harness.contents()
    assert rows == expected(events)
    for row, event in zip(rows, events, strict=True):  # field by field, independently
        assert row["seq"] == event.seq and row["op"] == event.op.value
        assert row.get("key") == plain(event.key)
        assert row.get("old_key") == plain(event.old_key)
        assert row.get("after") == plain(event.after)
        assert row.get("before") == plain(event.before)
        assert row.get("pos") == str(event.position)
        assert row.get("txid") == event.txid
        assert row.get("dump_id") == event.dump_id
        assert row.get("ts") == event.commit_ts
        assert row.get("unchanged", []) == list(event.unchanged)
        if event.table is not None:
            assert (row["schema"], row["table"]) == (event.table.schema, event.table.name)
    ops = {row["op"] for row in rows}
    assert ops == {op.value for op in Op if op is not Op.SCHEMA}


def test_reopen_with_a_lower_committed_seq_drops_what_was_beyond(harness: Any) -> None:
    output = harness.new_output()
    output.open(0)
    output.write(make_events(1, 10))
    assert output.flush() == 10
    output.close()

    output = harness.new_output()
    output.open(6)
    assert seqs(harness.contents()) == [1, 2, 3, 4, 5, 6]
    replacement = make_events(7, 12, tag="b")
    output.write(replacement)
    assert output.flush() == 12
    output.close()
    assert harness.contents() == expected(make_events(1, 6) + replacement)


def test_reopen_with_zero_drops_everything(harness: Any) -> None:
    output = harness.new_output()
    output.open(0)
    output.write(make_events(1, 5))
    output.flush()
    output.close()
    output = harness.new_output()
    output.open(0)
    assert harness.contents() == []
    output.write(make_events(1, 2, tag="c"))
    assert output.flush() == 2
    output.close()
    assert harness.contents() == expected(make_events(1, 2, tag="c"))


def test_reopen_with_the_same_or_a_higher_committed_seq_keeps_everything(harness: Any) -> None:
    output = harness.new_output()
    output.open(0)
    output.write(make_events(1, 5))
    output.flush()
    output.close()
    for committed in (5, 8):
        output = harness.new_output()
        output.open(committed)
        assert seqs(harness.contents()) == [1, 2, 3, 4, 5]
        output.close()


def test_repeated_restarts_continue_the_stream_exactly(harness: Any) -> None:
    committed = 0
    written: list[dict[str, Any]] = []
    for round_ in range(4):
        output = harness.new_output()
        output.open(committed)
        written = [row for row in written if row["seq"] <= committed]
        batch = make_events(committed + 1, committed + 6, tag=f"r{round_}")
        output.write(batch)
        assert output.flush() == committed + 6
        output.close()
        written += expected(batch)
        assert harness.contents() == written
        committed += 3  # only half of each round was committed
    assert seqs(harness.contents()) == list(range(1, committed + 4))


# -- jsonl specifics ------------------------------------------------------------------------


def jsonl(tmp_path: Path) -> tuple[JsonlHarness, Output]:
    harness = JsonlHarness(tmp_path)
    output = harness.new_output()
    assert isinstance(output, JsonlOutput)
    return harness, output


def test_jsonl_reopen_removes_a_torn_last_line(tmp_path: Path) -> None:
    harness, output = jsonl(tmp_path)
    output.open(0)
    output.write(make_events(1, 4))
    output.flush()
    output.close()
    with open(harness.path, "ab") as handle:
        handle.write(b'{"seq":5,"op":"ins')
    output = harness.new_output()
    output.open(10)  # the torn line is not a line even when its seq would be committed
    assert harness.contents() == expected(make_events(1, 4))
    output.write(make_events(5, 5))
    assert output.flush() == 5
    output.close()
    assert harness.contents() == expected(make_events(1, 5))


def test_jsonl_reopen_removes_a_complete_document_without_its_newline(tmp_path: Path) -> None:
    """A crash can persist a line's JSON but not its newline; it is torn all the same (the
    next append would otherwise continue on the same line)."""
    harness, output = jsonl(tmp_path)
    output.open(0)
    output.write(make_events(1, 3))
    output.flush()
    output.close()
    with open(harness.path, "ab") as handle:
        handle.write(orjson.dumps(native(make_events(4, 4)[0])))
    output = harness.new_output()
    output.open(10)
    output.write(make_events(4, 5, tag="z"))
    assert output.flush() == 5
    output.close()
    assert harness.contents() == expected(make_events(1, 3) + make_events(4, 5, tag="z"))


def test_jsonl_reopen_cuts_below_a_torn_line(tmp_path: Path) -> None:
    harness, output = jsonl(tmp_path)
    output.open(0)
    output.write(make_events(1, 4))
    output.flush()
    output.close()
    with open(harness.path, "ab") as handle:
        handle.write(b'{"seq":5,"op":"insert","af')
    output = harness.new_output()
    output.open(2)
    output.close()
    assert harness.contents() == expected(make_events(1, 2))


def test_jsonl_torn_line_without_any_complete_line(tmp_path: Path) -> None:
    harness = JsonlHarness(tmp_path)
    harness.path.parent.mkdir(parents=True)
    harness.path.write_bytes(b'{"seq":1,"op":"beg')
    output = harness.new_output()
    output.open(5)
    output.write(make_events(6, 6))
    output.flush()
    output.close()
    assert harness.contents() == expected(make_events(6, 6))


def test_jsonl_cut_across_read_blocks(tmp_path: Path) -> None:
    """The cut scans backwards in blocks: lines longer than and spanning block borders."""
    harness, output = jsonl(tmp_path)
    output.open(0)
    events = make_events(1, 400)
    for i, event in enumerate(events):
        if isinstance(event.after, dict):  # make_events builds every after-image as a dict
            event.after = {**event.after, "pad": "x" * (37 * i % 3000)}
    assert events[203].op is Op.INSERT
    events[203].after = {"id": 204, "pad": "y" * 70_000}  # one line longer than a block
    output.write(events)
    assert output.flush() == 400
    output.close()
    assert harness.path.stat().st_size > 3 * (1 << 16)
    for committed in (399, 250, 205, 204, 203, 123, 1):
        output = harness.new_output()
        output.open(committed)
        output.close()
        assert harness.contents() == expected(events[:committed]), committed


def test_jsonl_empty_file_and_missing_directory(tmp_path: Path) -> None:
    harness = JsonlHarness(tmp_path / "deeper")
    output = harness.new_output()
    output.open(0)
    assert harness.path.exists()
    output.close()
    output = harness.new_output()
    output.open(3)  # an empty file stays empty
    output.close()
    assert harness.path.read_bytes() == b""


def test_jsonl_flush_makes_the_data_visible_to_another_reader(tmp_path: Path) -> None:
    harness, output = jsonl(tmp_path)
    output.open(0)
    output.write(make_events(1, 3))
    assert output.flush() == 3
    assert seqs(harness.contents()) == [1, 2, 3]  # not closed yet
    output.close()
