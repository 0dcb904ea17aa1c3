"""Unit tests of the helpers bench/replica.py and bench/spark.py share (bench/common.py's
``on_postgres``, bench/replica.py's ``timed_dump`` and ``source_args``), without a server."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench(name: str) -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module(name)


def test_on_postgres_measures_in_a_temporary_folder_and_prints_one_json_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[tuple[str, Path, bool]] = []

    def measure(dsn: str, workdir: Path) -> dict[str, Any]:
        seen.append((dsn, workdir, workdir.is_dir()))
        return {"rows": 3}

    assert bench("common").on_postgres("host=x", "dblog-test-", measure) == 0
    [(dsn, workdir, existed)] = seen
    assert dsn == "host=x" and existed and workdir.name.startswith("dblog-test-")
    assert not workdir.exists()
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == [{"rows": 3}]


def test_on_postgres_removes_the_folder_and_prints_nothing_when_measure_fails(
        capsys: pytest.CaptureFixture[str]) -> None:
    kept: list[Path] = []

    def measure(dsn: str, workdir: Path) -> dict[str, Any]:
        kept.append(workdir)
        raise RuntimeError("the benchmark failed")

    with pytest.raises(RuntimeError):
        bench("common").on_postgres("host=x", "dblog-test-", measure)
    assert not kept[0].exists() and capsys.readouterr().out == ""


class DumpingPipeline:
    """What ``timed_dump`` asks of a started pipeline: a dump done after two polls."""

    _thread = None

    def __init__(self) -> None:
        self.polls, self.dumped = 0, list[list[str]]()

    def dump(self, tables: list[str]) -> str:
        self.dumped.append(tables)
        return "d1"

    def status(self) -> dict[str, Any]:
        self.polls += 1
        state = "done" if self.polls >= 2 else "running"
        return {"dumps": [{"id": "d1", "state": state,
                           "tables": [{"rows": 5}, {"rows": 7}]}],
                "committed_seq": 10, "emitted_seq": 10}


def test_timed_dump_dumps_the_benchmark_table_and_counts_its_rows() -> None:
    replica = bench("replica")
    pipeline = DumpingPipeline()
    rows, seconds = replica.timed_dump(pipeline, 60)
    assert rows == 12 and seconds >= 0 and pipeline.dumped == [[replica.TABLE]]


def test_source_args_are_the_same_for_every_replica_benchmark() -> None:
    parser = argparse.ArgumentParser()
    bench("replica").source_args(parser, rows=1234)
    args = parser.parse_args([])
    assert vars(args) == {"db": "postgres", "rows": 1234, "updates": 100_000,
                          "chunk_size": 1000, "dsn": None}
