"""A built wheel installs connectors/ and outputs/ as dblog.connectors / dblog.outputs only."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_imports_under_dblog_namespace(tmp_path: Path) -> None:
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
         str(tmp_path / "dist"), str(ROOT)], capture_output=True, text=True, check=False)
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("dblog-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "dblog/connectors/postgres/replication.py" in names
    assert "dblog/outputs/jsonl.py" in names
    assert not [n for n in names if n.startswith(("connectors/", "outputs/"))]
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = ("import dblog.connectors.postgres as p, dblog.outputs.jsonl as j, sys;"
             f"assert p.__file__.startswith({str(site)!r}), p.__file__;"
             "import importlib.util as u;"
             "assert u.find_spec('connectors') is None and u.find_spec('outputs') is None;"
             "print('ok')")
    run = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True,
                         cwd=tmp_path, env={"PYTHONPATH": f"{site}:{_deps_path()}"}, check=False)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]


def _deps_path() -> str:
    import orjson
    import psycopg
    import pydantic
    import yaml

    dirs = set()
    for module in (orjson, psycopg, pydantic, yaml):
        assert module.__file__ is not None, f"{module.__name__} has no file"
        dirs.add(str(Path(module.__file__).resolve().parents[1]))
    return ":".join(sorted(dirs))
