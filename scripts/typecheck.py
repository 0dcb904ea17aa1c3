#!/usr/bin/env python
"""mypy --strict over dblog/, connectors/, outputs/ and tests/ as the installed package sees them.

``connectors/`` and ``outputs/`` install as ``dblog.connectors`` and ``dblog.outputs`` (through
setuptools' package-dir), a mapping mypy cannot follow. This script lays the four trees out
as one package of symlinks in a temporary folder and runs mypy there with the project's
configuration; paths in its report are relative to the repository.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def shadow_tree(into: Path) -> None:
    package = into / "dblog"
    package.mkdir()
    for entry in (ROOT / "dblog").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    (package / "connectors").symlink_to(ROOT / "connectors")
    (package / "outputs").symlink_to(ROOT / "outputs")
    (into / "tests").symlink_to(ROOT / "tests")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="dblog-mypy-") as tmp:
        shadow_tree(Path(tmp))
        done = subprocess.run(
            [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
             "--cache-dir", str(ROOT / ".mypy_cache"), "dblog", "tests", *sys.argv[1:]],
            cwd=tmp, text=True, capture_output=True)
    report = done.stdout.replace("dblog/connectors/", "connectors/")
    report = report.replace("dblog/outputs/", "outputs/")
    sys.stdout.write(report)
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
