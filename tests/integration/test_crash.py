"""Crash test on every source (PostgreSQL, MariaDB): SIGKILL the capture process at random
moments during a dump with writers running; restart it several times; the final output still
replays to the source and the dump resumed."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from dblog.state import FileStateStore, state_from_json

from .pgutil import (
    check_commit_order,
    check_no_time_travel,
    read_events,
    replayed,
    wait_until,
)
from .sources import Kit, kit

pytestmark = pytest.mark.integration
__all__ = ["kit"]

CONFIG = """
name: crash
source: {source}
outputs:
  - type: jsonl
    path: "{out}"
state:
  path: "{state}"
engine:
  chunk_size: 50
  chunk_delay_s: 0.04   # keeps the dump running across the kills
  flush_interval_s: 0.1
  heartbeat_interval_s: 1
initial_dumps:
  - tables: {tables}
"""


def _start(config: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as handle:
        return subprocess.Popen([sys.executable, "-m", "dblog", "run", "--config",
                                 str(config)],
                                stdout=handle, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _lives(log: Path) -> int:
    """How many capture processes got as far as serving their API (logged once per start)."""
    return log.read_text().count("dblog.api: API at") if log.exists() else 0


def _wait_for_life(log: Path, lives: int) -> None:
    wait_until(lambda: _lives(log) >= lives, 120, f"capture process {lives} to start")


def _dump_progress(state_path: Path) -> tuple[int, str] | None:
    stored = FileStateStore(state_path).load()
    if stored is None:
        return None
    dumps = [d for d in state_from_json(stored.data).dumps.dumps if not d.internal]
    return (dumps[0].chunks, dumps[0].state.value) if dumps else None


def test_sigkill_during_dump_loses_nothing_and_resumes(kit: Kit, tmp_path: Path) -> None:
    kit.create_schema(rows=6000)
    out, state = tmp_path / "out.jsonl", tmp_path / "state.json"
    config = tmp_path / "dblog.yaml"
    config.write_text(CONFIG.format(source=json.dumps(kit.source_config("crash")), out=out,
                                    state=state, tables=json.dumps(kit.tables)))
    log = tmp_path / "dblog.log"
    rng = random.Random(7)
    kills_mid_dump = 0
    with kit.writers(rows=6000, count=2) as writers:
        for kills in range(6):
            proc = _start(config, log)
            # the random moment counts from the capture's start-up (which takes seconds on a
            # loaded machine): a process killed while importing tests nothing
            _wait_for_life(log, kills + 1)
            time.sleep(rng.uniform(1.5, 4.0))
            progress = _dump_progress(state)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            if progress is not None and progress[1] != "done" and progress[0] > 0:
                kills_mid_dump += 1
        proc = _start(config, log)
        try:
            wait_until(lambda: (_dump_progress(state) or (0, ""))[1] == "done", 300,
                       "the dump to finish after the restarts")
            writers.stop()
            target = kit.current_position()

            def caught_up() -> bool:
                stored = FileStateStore(state).load()
                position = state_from_json(stored.data).position if stored else None
                return isinstance(position, type(target)) and position >= target

            wait_until(caught_up, 120, "the capture to catch up")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    assert not writers.errors, writers.errors
    assert kills_mid_dump >= 2, (f"only {kills_mid_dump} kills hit a running dump: "
                                 f"{log.read_text()[-3000:]}")
    events = read_events(out)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), "seq must be gapless"
    check_commit_order(events, kit.parse_position)
    check_no_time_travel(events)
    assert replayed(events) == kit.source_rows(kit.tables)
    # resumed, not restarted: no key was read twice by the dump (a restart would re-read them)
    dump_ids = {e["dump_id"] for e in events if e["op"] == "read"}
    reads = Counter((e["table"], tuple(e["key"])) for e in events if e["op"] == "read")
    assert len(dump_ids) == 1
    twice = [k for k, n in reads.items() if n > 1]
    assert not twice, f"{len(twice)} keys were dumped twice, e.g. {twice[:3]}"
