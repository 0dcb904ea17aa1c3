"""The code stays in small pieces: modules under 400 lines, functions under 40, and no
``hasattr`` probing of abilities (optional abilities are protocols in :mod:`dblog.spi`)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREES = ("dblog", "connectors", "outputs")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 40


def _modules() -> list[Path]:
    return sorted(p for tree in TREES for p in (ROOT / tree).rglob("*.py"))


def test_there_are_modules_to_check() -> None:
    assert len(_modules()) > 40


def test_modules_are_under_400_lines() -> None:
    long = [f"{p.relative_to(ROOT)}: {n}" for p in _modules()
            if (n := p.read_text(encoding="utf-8").count("\n")) > MAX_MODULE_LINES]
    assert not long, long


def test_functions_are_under_40_lines() -> None:
    long = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length}")
    assert not long, long


def test_no_hasattr_probing() -> None:
    calls = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id == "hasattr":
                calls.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not calls, calls


def test_every_package_is_listed_for_the_wheel() -> None:
    """pyproject.toml lists packages by name (package-dir maps connectors/ and outputs/): a
    package left out would be missing from the installed wheel."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    names = {"dblog": "dblog", "connectors": "dblog.connectors", "outputs": "dblog.outputs"}
    found = {".".join([names[init.relative_to(ROOT).parts[0]],
                       *init.relative_to(ROOT).parts[1:-1]])
             for tree in TREES for init in (ROOT / tree).rglob("__init__.py")}
    assert found - listed == set()
