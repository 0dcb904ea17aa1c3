"""A built-in connector or output whose driver is missing names the pip extra that installs it,
whether dblog is installed (entry points) or run from a checkout (the built-in table)."""

from __future__ import annotations

from importlib import metadata
from typing import Any

import pytest

from dblog.app import plugins
from dblog.errors import ConfigError

MISSING = [
    ("dblog.connectors", "mariadb", "pip install 'dblog[mysql]'"),
    ("dblog.connectors", "postgres", "pip install 'dblog[postgres]'"),
    ("dblog.outputs", "kafka", "pip install 'dblog[kafka]'"),
    ("dblog.outputs", "jsonl", "reinstall dblog"),
]


@pytest.mark.parametrize("installed", [True, False], ids=["entry-point", "built-in"])
@pytest.mark.parametrize(("group", "name", "fix"), MISSING)
def test_a_missing_driver_names_the_extra_that_installs_it(
        monkeypatch: pytest.MonkeyPatch, group: str, name: str, fix: str,
        installed: bool) -> None:
    broken = "dblog_no_such_module_here:Thing"
    builtin = {g: dict(names) for g, names in plugins._BUILTIN.items()}
    builtin[group][name] = broken
    monkeypatch.setattr(plugins, "_BUILTIN", builtin)

    def entry_points(group: str) -> list[Any]:
        return [metadata.EntryPoint(name, broken, group)] if installed else []

    monkeypatch.setattr(plugins, "entry_points", entry_points)
    with pytest.raises(ConfigError, match=f"{name} support is not installed") as caught:
        plugins._load(group, name)
    assert caught.value.fix is not None and caught.value.fix.startswith(fix)


def test_a_third_party_plugins_missing_dependency_is_not_blamed_on_dblog(
        monkeypatch: pytest.MonkeyPatch) -> None:
    broken = metadata.EntryPoint("thirdparty", "dblog_no_such_module_here:Thing", "dblog.outputs")
    monkeypatch.setattr(plugins, "entry_points", lambda group: [broken])
    with pytest.raises(ConfigError, match="thirdparty support is not installed") as caught:
        plugins._load("dblog.outputs", "thirdparty")
    assert caught.value.fix == "install the package that provides 'thirdparty' with its " \
                               "dependencies"


def test_an_unknown_type_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="unknown output type 'kafak'") as caught:
        plugins._load("dblog.outputs", "kafak")
    assert caught.value.fix == "use one of: delta, jsonl, kafka, spark, sql"
