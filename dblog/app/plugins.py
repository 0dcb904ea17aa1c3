"""Connectors and outputs by name, through the ``dblog.connectors`` / ``dblog.outputs`` entry
points (third-party packages register theirs the same way)."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any, Protocol

from pydantic import BaseModel

from dblog.app.config import validate
from dblog.errors import ConfigError
from dblog.spi import Output, SourceConnector

_BUILTIN = {
    "dblog.connectors": {"postgres": "dblog.connectors.postgres:PostgresConnector",
                         "mysql": "dblog.connectors.mysql:MysqlConnector",
                         "mariadb": "dblog.connectors.mysql:MysqlConnector"},
    "dblog.outputs": {"jsonl": "dblog.outputs.jsonl:JsonlOutput",
                      "kafka": "dblog.outputs.kafka:KafkaOutput",
                      "sql": "dblog.outputs.sql:SqlOutput",
                      "delta": "dblog.outputs.delta:DeltaOutput",
                      "spark": "dblog.outputs.spark:SparkOutput"},
}
_EXTRAS = {"postgres": "postgres", "mysql": "mysql", "mariadb": "mysql", "kafka": "kafka",
           "sql": "sql", "delta": "delta", "spark": "spark"}
"""The pip extra that installs what a built-in connector or output imports."""


def _load(group: str, name: str) -> Any:
    """The class a ``type`` names: an installed entry point, else dblog's built-in one. A
    driver that is missing (ImportError) is a ConfigError naming the extra to install."""
    load = next((ep.load for ep in entry_points(group=group) if ep.name == name), None)
    target = _BUILTIN[group].get(name)
    if load is None and target is None:
        known = sorted({ep.name for ep in entry_points(group=group)} | set(_BUILTIN[group]))
        raise ConfigError(f"unknown {group.split('.')[-1][:-1]} type {name!r}",
                          fix=f"use one of: {', '.join(known)}")
    try:
        return load() if load is not None else _builtin(target or "")
    except ImportError as exc:
        raise ConfigError(f"{name} support is not installed ({exc})",
                          fix=_install_fix(group, name)) from exc


def _install_fix(group: str, name: str) -> str:
    extra = _EXTRAS.get(name)
    if extra is not None:
        return f"pip install 'dblog[{extra}]'"
    if name in _BUILTIN[group]:
        return "reinstall dblog: one of its own modules failed to import"
    return f"install the package that provides {name!r} with its dependencies"


def _builtin(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(__import__(module, fromlist=[attr]), attr)


class ConnectorClass(Protocol):
    """What a ``dblog.connectors`` entry point names: a class with its pydantic config model."""

    config_model: type[BaseModel]

    def __call__(self, config: Any, instance: str) -> SourceConnector: ...


class OutputClass(Protocol):
    """What a ``dblog.outputs`` entry point names: a class with its pydantic config model."""

    config_model: type[BaseModel]

    def __call__(self, config: Any) -> Output: ...


def _kind(raw: dict[str, Any], where: str, example: str) -> str:
    kind = raw.get("type")
    if not kind or not isinstance(kind, str):
        raise ConfigError(f"{where}.type is missing", fix=f"set {where}.type: {example}")
    return kind


def build_connector(raw: dict[str, Any], instance: str) -> SourceConnector:
    cls: ConnectorClass = _load("dblog.connectors", _kind(raw, "source", "postgres"))
    return cls(validate(cls.config_model, raw, "source"), instance)


def build_output(raw: dict[str, Any], index: int) -> Output:
    where = f"outputs.{index}"
    cls: OutputClass = _load("dblog.outputs", _kind(raw, where, "jsonl"))
    return cls(validate(cls.config_model, raw, where))
