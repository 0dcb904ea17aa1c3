"""Whether a file can be written where the configuration puts it (``dblog check``: the state
file, a jsonl output), without writing it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def unwritable_reason(path: Path) -> str | None:
    """Why a file at ``path`` could not be appended to or created (its missing folders made
    on the way), or None."""
    if path.is_dir():
        return "is a folder"
    if path.exists():
        return None if os.access(path, os.W_OK) else "cannot be written by this user"
    folder = path.parent.absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"cannot be created: {folder} is not a folder"
    try:  # os.access says yes to root even where the file system refuses (/proc)
        handle, probe = tempfile.mkstemp(prefix=".dblog-check-", dir=folder)
    except OSError as exc:
        return f"cannot be created in {folder}: {exc.strerror or exc}"
    os.close(handle)
    os.unlink(probe)
    return None
