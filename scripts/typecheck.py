#!/usr/bin/env python
"""mypy --strict over dblog/, connectors/, outputs/, tests/ and bench/, as installed and run.

``connectors/`` and ``outputs/`` install as ``dblog.connectors`` and ``dblog.outputs`` (through
setuptools' package-dir), a mapping mypy cannot follow. This script lays the four trees out
as one package of symlinks in a temporary folder (tests/ and bench/ beside it) and runs mypy
there with the project's configuration; paths in its report are relative to the repository.

``bench/`` is checked by a second run over the same tree and configuration: its scripts are
top-level modules that import each other (``from common import ...``, their own folder being
first on ``sys.path``), which mypy sees the same way when given the folder, as it has no
``__init__.py``. A run of its own keeps that folder off the search path of the package and
tests, where its modules (``kafka``, ``mysql``, ``run``, ...) could shadow other imports.
Extra arguments go to both runs. A failing run's report is written last, so that the output
ends in "Success" only when both runs succeed.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = (("dblog", "tests"), ("bench",))


def shadow_tree(into: Path) -> None:
    package = into / "dblog"
    package.mkdir()
    for entry in (ROOT / "dblog").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    (package / "connectors").symlink_to(ROOT / "connectors")
    (package / "outputs").symlink_to(ROOT / "outputs")
    (into / "tests").symlink_to(ROOT / "tests")
    (into / "bench").symlink_to(ROOT / "bench")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="dblog-mypy-") as tmp:
        shadow_tree(Path(tmp))
        runs = [subprocess.run(
            [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
             "--cache-dir", str(ROOT / ".mypy_cache"), *targets, *sys.argv[1:]],
            cwd=tmp, text=True, capture_output=True) for targets in RUNS]
    for done in sorted(runs, key=lambda run: run.returncode != 0):
        report = done.stdout.replace("dblog/connectors/", "connectors/")
        report = report.replace("dblog/outputs/", "outputs/")
        sys.stdout.write(report)
        sys.stderr.write(done.stderr)
    return max(done.returncode for done in runs)


if __name__ == "__main__":
    sys.exit(main())
