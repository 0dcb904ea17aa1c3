"""Connectors and outputs by name, through the ``dblog.connectors`` / ``dblog.outputs`` entry
points (third-party packages register theirs the same way)."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

from dblog.config import validate
from dblog.errors import ConfigError

_BUILTIN = {
    "dblog.connectors": {"postgres": "dblog.connectors.postgres:PostgresConnector"},
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


def build_connector(raw: dict[str, Any], instance: str) -> Any:
    kind = raw.get("type")
    if not kind:
        raise ConfigError("source.type is missing", fix="set source.type: postgres")
    cls = _load("dblog.connectors", kind)
    config_model = getattr(__import__(cls.__module__, fromlist=["_"]), f"{cls.__name__[:-9]}Config",
                           None)
    config = validate(config_model, raw, "source") if config_model else raw
    return cls(config, instance)


def build_output(raw: dict[str, Any], index: int) -> Any:
    kind = raw.get("type")
    if not kind:
        raise ConfigError(f"outputs.{index}.type is missing", fix="set type: jsonl")
    cls = _load("dblog.outputs", kind)
    config_model = getattr(__import__(cls.__module__, fromlist=["_"]), f"{cls.__name__[:-6]}Config",
                           None)
    config = validate(config_model, raw, f"outputs.{index}") if config_model else raw
    return cls(config)
