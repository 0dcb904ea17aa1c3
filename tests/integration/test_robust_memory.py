"""Issue 16, finding 2: memory stays bounded whatever ``chunk_size`` is. bench/chunk_memory.py
dumps a 500k-row table at chunk_size 1,000 and 1,000,000, each in a fresh process, and the
larger peak RSS must stay within twice the smaller (before the cap: 52 MB against 611 MB)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
BENCH = Path(__file__).resolve().parents[2] / "bench" / "chunk_memory.py"


def test_peak_memory_at_the_largest_chunk_size_stays_within_twice_the_default(
        pg_dsn: str) -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--dsn", pg_dsn, "--rows", "500000",
                           "--sizes", "1000,1000000"], capture_output=True, text=True,
                          timeout=1800, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print("chunk memory:", json.dumps(result))  # the figures, for the report (pytest -s)
    small, large = sorted(result["runs"], key=lambda r: r["chunk_size"])
    assert small["rows"] == large["rows"] == 500_000
    assert large["peak_rss_mb"] <= 2 * small["peak_rss_mb"], result
