"""Connectors and outputs by name, through the ``dblog.connectors`` / ``dblog.outputs`` entry
points (third-party packages register theirs the same way)."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

from dblog.app.config import validate
from dblog.errors import ConfigError

_BUILTIN = {
    "dblog.connectors": {"postgres": "dblog.connectors.postgres:PostgresConnector",
                         "mysql": "dblog.connectors.mysql:MysqlConnector",
                         "mariadb": "dblog.connectors.mysql:MysqlConnector"},
    "dblog.outputs": {"jsonl": "dblog.outputs.jsonl:JsonlOutput"},
}


def _load(group: str, name: str) -> Any:
    for ep in entry_points(group=group):
        if ep.name == name:
            return ep.load()
    target = _BUILTIN[group].get(name)
    if target is None:
        known = sorted({ep.name for ep in entry_points(group=group)} | set(_BUILTIN[group]))
        raise ConfigError(f"unknown {group.split('.')[-1][:-1]} type {name!r}",
                          fix=f"use one of: {', '.join(known)}")
    module, _, attr = target.partition(":")
    try:
        return getattr(__import__(module, fromlist=[attr]), attr)
    except ImportError as exc:
        raise ConfigError(f"{name} support is not installed ({exc})",
                          fix=f"pip install 'dblog[{name}]'") from exc


def _configured(group: str, raw: dict[str, Any], where: str, example: str) -> tuple[Any, Any]:
    """The class for ``raw["type"]`` and its validated configuration (through the class's
    ``config_model`` attribute when it declares one)."""
    kind = raw.get("type")
    if not kind:
        raise ConfigError(f"{where}.type is missing", fix=f"set {where}.type: {example}")
    cls = _load(group, kind)
    model = getattr(cls, "config_model", None)
    return cls, validate(model, raw, where) if model is not None else raw


def build_connector(raw: dict[str, Any], instance: str) -> Any:
    cls, config = _configured("dblog.connectors", raw, "source", "postgres")
    return cls(config, instance)


def build_output(raw: dict[str, Any], index: int) -> Any:
    cls, config = _configured("dblog.outputs", raw, f"outputs.{index}", "jsonl")
    return cls(config)
