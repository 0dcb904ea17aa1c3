"""A deposed leader writes nothing more: it does not open (cut back) outputs, does not flush what
it wrote before it noticed, and does not write out buffered bytes when its outputs close."""

from __future__ import annotations

from pathlib import Path

import pytest

from dblog.acks import PipelineState
from dblog.delivery import Delivery
from dblog.errors import LeadershipLost
from dblog.model import ChangeEvent, Op, TableId
from dblog.outputs.jsonl import JsonlOutput
from dblog.testing import FakeClock, MemoryStateStore

T = TableId("public", "t")


def event(i: int) -> ChangeEvent:
    return ChangeEvent(Op.INSERT, T, (i,), None, {"id": i}, None)


class Flag:
    def __init__(self) -> None:
        self.leader = True

    def __call__(self) -> bool:
        return self.leader


def delivery(out: JsonlOutput, flag: Flag) -> Delivery:
    d = Delivery([out], MemoryStateStore(), FakeClock(), epoch=1, batch_size=10)
    d.is_leader = flag
    return d


def lines(path: Path) -> int:
    return len(path.read_bytes().splitlines()) if path.exists() else 0


def test_a_deposed_leader_discards_buffered_output_on_close(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    flag = Flag()
    d = delivery(JsonlOutput({"path": str(path)}), flag)
    d.resume(PipelineState(), None)
    d.emit_all([event(i) for i in range(20)])  # written into the file object's buffer
    assert lines(path) == 0
    flag.leader = False
    d.close()
    assert lines(path) == 0, "buffered lines reached the file after leadership was lost"


def test_a_leader_writes_buffered_output_on_close(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    d = delivery(JsonlOutput({"path": str(path)}), Flag())
    d.resume(PipelineState(), None)
    d.emit_all([event(i) for i in range(20)])
    d.close()
    assert lines(path) == 20


def test_a_deposed_leader_does_not_flush_or_commit(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    flag = Flag()
    d = delivery(JsonlOutput({"path": str(path)}), flag)
    d.resume(PipelineState(), None)
    d.emit_all([event(i) for i in range(20)])
    d.mark(None)
    flag.leader = False
    with pytest.raises(LeadershipLost):
        d.commit()
    d.close()
    assert lines(path) == 0
    assert d.state.seq == 0


def test_a_deposed_leader_does_not_open_and_cut_back_outputs(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(b'{"seq":1}\n{"seq":2}\n')  # a successor wrote seq 2, not yet committed
    flag = Flag()
    flag.leader = False
    d = delivery(JsonlOutput({"path": str(path)}), flag)
    with pytest.raises(LeadershipLost):
        d.resume(PipelineState(seq=1), 0)
    assert lines(path) == 2
