"""The server's own wal2json rate: ``pg_recvlogical`` (libpq, C) reading a slot to ``/dev/null``.

No client decodes anything, so this is the most any consumer of the slot can get: on the
2-core machine it was no faster than the bench's bare Python consumer, i.e. the stream is
bound by the server's logical decoding and wal2json, not by the client.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path


def find_recvlogical() -> str | None:
    """``pg_recvlogical`` from the server binaries the harness uses, else from ``PATH``."""
    from dblog.harness.postgres import HarnessError, find_pg_bindir

    try:
        candidate = find_pg_bindir() / "pg_recvlogical"
    except HarnessError:
        return shutil.which("pg_recvlogical")
    return str(candidate) if Path(candidate).exists() else shutil.which("pg_recvlogical")


def recvlogical_seconds(dsn: str, slot: str, options: dict[str, str], end_lsn: str,
                        timeout_s: float) -> float | None:
    """Seconds ``pg_recvlogical`` takes to read ``slot`` up to ``end_lsn`` with the plugin
    ``options``, its output discarded; None when the tool is not installed."""
    tool = find_recvlogical()
    if tool is None:
        return None
    plugin_options = [arg for key, value in options.items() for arg in ("-o", f"{key}={value}")]
    started = time.monotonic()
    subprocess.run([tool, "-d", dsn, "-S", slot, "--start", "-E", end_lsn, "-f", "/dev/null",
                    "--no-loop", *plugin_options], check=True, timeout=timeout_s)
    return time.monotonic() - started
