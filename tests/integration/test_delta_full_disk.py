"""A full disk under the Delta table while writers run (issue 12, faults): the Delta output's
flushes fail with "No space left on device", classified retryable; capture waits and retries
with backoff; once there is room again the replica catches up and equals the source.

The table lives on a tmpfs of its own (mounted by the test: the machines running the suite are
root), and kept full to the last byte by a filler file after the dump, so the moment it runs
full does not depend on how large Delta's files happen to be."""

from __future__ import annotations

import errno
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dblog.core.model import TableId
from tests.replica_targets import DeltaTarget, source_lookup

from .pgutil import dump_state, wait_until
from .sources import Kit
from .test_replica_outputs import _catch_up, _pipeline, assert_equal_to_source

pytestmark = pytest.mark.integration
_DISK_MB = 64
_FULL_S = 12.0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of ``_DISK_MB`` MB at ``tmp_path/tmpfs`` (root, or sudo without a password, as
    for scripts/setup.sh; a failure to mount is an error)."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]  # as scripts/setup.sh
    subprocess.run([*sudo, "mount", "-t", "tmpfs", "-o", f"size={_DISK_MB}m", "tmpfs",
                    str(mount)], check=True, capture_output=True)
    try:
        if sudo:
            subprocess.run([*sudo, "chown", str(os.geteuid()), str(mount)], check=True)
        yield mount
    finally:
        subprocess.run([*sudo, "umount", "-l", str(mount)], check=False, capture_output=True)


class Filler:
    """Keeps ``disk`` full: a thread writes into a filler file whatever room appears (a failed
    Delta write removes its partial file, which would otherwise let the next attempt fit)."""

    def __init__(self, disk: Path) -> None:
        self.path = disk / "filler"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, daemon=True)

    def __enter__(self) -> Filler:
        self._handle = open(self.path, "wb", buffering=0)
        self._top_up()
        stat = os.statvfs(self.path.parent)
        assert stat.f_bavail == 0, f"{stat.f_bavail} blocks still free"
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._handle.close()
        self.path.unlink()

    def _fill(self) -> None:
        while not self._stop.wait(0.005):
            self._top_up()

    def _top_up(self) -> None:
        for size in (1 << 20, 1 << 12, 1):
            while True:
                try:
                    self._handle.write(b"\0" * size)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break


def test_a_full_disk_under_the_delta_table_pauses_capture_and_loses_nothing(
        pg_dsn: str, small_disk: Path, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    source = Kit("postgres", pg_dsn)
    source.create_schema(rows=500)
    reader = source.chunk_reader()
    target = DeltaTarget(small_disk / "delta", source_lookup(reader))
    pipeline = _pipeline(source, target.new_output(pipeline="full-disk"), tmp_path).start()
    try:
        with source.writers(rows=500, count=2) as writers:
            dump_id = pipeline.dump(source.tables)
            wait_until(lambda: dump_state(pipeline, dump_id) == "done", 300, "the dump")
            with Filler(small_disk):
                wait_until(lambda: _full_disk_retries(caplog) >= 3, 60,
                           "three retried flushes of the Delta output on the full disk")
                committed, started = pipeline.status()["committed_seq"], writers.committed
                time.sleep(_FULL_S)  # past the output's retries: the engine restarts and waits
                assert writers.committed > started + 50, "the writers stalled"
                assert pipeline.is_running(), "a full disk stopped the pipeline"
                assert pipeline.status()["committed_seq"] == committed, \
                    "the state was committed past what the full disk holds"
            wait_until(lambda: writers.committed > started + 150, 60, "writes after the room")
        assert not writers.errors, writers.errors
        _catch_up(pipeline, source, timeout=240)
        assert pipeline.is_running()
    finally:
        pipeline.stop()
    try:
        assert assert_equal_to_source(source, target) > 500
        assert all(target.live(TableId.parse(t)) for t in source.tables)
    finally:
        reader.close()
        target.close()


def _full_disk_retries(caplog: pytest.LogCaptureFixture) -> int:
    messages = [r.getMessage() for r in caplog.records]
    return sum(1 for m in messages if m.startswith("flush delta:") and "retrying" in m
               and "the disk under the Delta table is full" in m)
