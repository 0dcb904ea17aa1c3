"""The YAML configuration: one file, ``${VAR}`` substitution, validated at start.

Errors name the field and the fix, for example::

    config.yaml: engine.chunk_sise: unknown key (did you mean chunk_size?)
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dblog.api.config import ApiConfig
from dblog.app.configcheck import StrictLoader, register_secrets, strict_problems, yaml_problem
from dblog.engine.settings import EngineSettings
from dblog.errors import ConfigError
from dblog.runtime.redact import RedactedRepr, register_variable

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class StateConfig(RedactedRepr, BaseModel):
    """``type: file`` (one embedded instance) or ``type: zookeeper`` (HA: leader election and
    the state in ZooKeeper; needs ``pip install 'dblog[zookeeper]'``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["file", "zookeeper"] = "file"
    path: str = "dblog-state.json"
    hosts: str | None = None
    """ZooKeeper connection string, e.g. ``zk1:2181,zk2:2181``."""
    root: str = Field("/dblog", pattern=r"^(/[A-Za-z0-9_.-]+)+$")
    session_timeout_s: float = Field(10.0, ge=1.0, le=60.0)
    connect_timeout_s: float = Field(15.0, gt=0)
    instance_id: str | None = None
    """How this instance appears in ``dblog status`` (default: host:pid)."""

    @field_validator("hosts")
    @classmethod
    def _hosts_are_servers(cls, hosts: str | None) -> str | None:
        problem = None if hosts is None else zookeeper_hosts_problem(hosts)
        if problem:
            raise ValueError(f"{problem} in {hosts!r}: write host:port[,host:port...][/chroot], "
                             "e.g. zk1:2181,zk2:2181,zk3:2181")
        return hosts

    @model_validator(mode="after")
    def _hosts_for_zookeeper(self) -> StateConfig:
        if self.type == "zookeeper" and not self.hosts:
            raise ValueError("hosts is required when type is zookeeper "
                             "(e.g. hosts: 127.0.0.1:2181 or hosts: ${DBLOG_ZK_HOSTS})")
        return self


class DumpRequestConfig(BaseModel):
    """A dump requested when the pipeline starts for the first time (no state yet)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tables: list[str] | None = None


class PipelineConfig(RedactedRepr, BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field("dblog", pattern=r"^[A-Za-z0-9_.-]{1,63}$")
    source: dict[str, Any]
    outputs: list[dict[str, Any]] = Field(min_length=1)
    state: StateConfig = Field(default_factory=StateConfig)
    engine: EngineSettings = Field(default_factory=EngineSettings)
    initial_dumps: list[DumpRequestConfig] = Field(default_factory=list)
    api: ApiConfig = Field(default_factory=ApiConfig)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @field_validator("outputs")
    @classmethod
    def _one_place_per_output(cls, outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        problem = shared_output_path(outputs) or shared_transactional_id(outputs)
        if problem:
            raise ValueError(problem)
        return outputs

    @model_validator(mode="after")
    def _initial_dumps_at_the_top(self) -> PipelineConfig:
        if self.engine.initial_dumps:
            raise ValueError("engine.initial_dumps is set by the top-level initial_dumps list")
        return self


_ZK_SERVER = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+)(?::(.*))?$")


def zookeeper_hosts_problem(hosts: str) -> str | None:
    """What is wrong with a ZooKeeper connection string (kazoo's ``host:port,...[/chroot]``),
    or None. kazoo itself raised a bare ValueError on a port that is no number, and retried
    an empty server forever."""
    if "://" in hosts:
        return "not a URL"
    if any(c.isspace() for c in hosts):
        return "servers are separated by commas, without spaces"
    for server in hosts.partition("/")[0].split(","):
        match = _ZK_SERVER.match(server)
        if not server or match is None:
            return "an empty server" if not server else f"server {server!r} is not host:port"
        port = match.group(2)
        if port is not None and not (port.isascii() and port.isdigit()):
            return f"port {port!r} is not a number"
        if port is not None and not 1 <= int(port) <= 65535:
            return f"port {port} is out of range (1-65535)"
    return None


_PATH_OUTPUTS = {"jsonl": "-", "delta": None}
"""Output types that write to a path of their own, with their default path."""


def shared_output_path(outputs: list[dict[str, Any]]) -> str | None:
    """Two outputs that would write one file or folder (each cutting back the other's
    lines, or two replicas in one Delta folder), named with the fix; or None."""
    seen: dict[str, int] = {}
    for index, raw in enumerate(outputs):
        if not isinstance(raw, dict) or raw.get("type") not in _PATH_OUTPUTS:
            continue
        path = raw.get("path", _PATH_OUTPUTS[str(raw.get("type"))])
        if not isinstance(path, str) or not path:
            continue
        place = path if path == "-" else path.rstrip("/") if "://" in path \
            else os.path.abspath(path)
        if place in seen:
            return (f"outputs.{index}.path: {path!r} is also where outputs.{seen[place]} "
                    "writes: two outputs cannot write one place (give each output its own "
                    "path)")
        seen[place] = index
    return None


def shared_transactional_id(outputs: list[dict[str, Any]]) -> str | None:
    """Two exactly-once Kafka outputs with one transactional id (``dblog-<name>`` when
    unset): each one's ``init_transactions`` would fence the other; or None."""
    seen: dict[object, int] = {}
    for index, raw in enumerate(outputs):
        if not isinstance(raw, dict) or raw.get("type") != "kafka" \
                or raw.get("delivery") != "exactly-once":
            continue
        tid = raw.get("transactional_id")
        if tid in seen:
            named = "the default dblog-<name>" if tid is None else repr(tid)
            return (f"outputs.{index}.transactional_id: outputs.{seen[tid]} and outputs."
                    f"{index} are exactly-once Kafka outputs with one transactional id "
                    f"({named}): each would fence the other (give each its own "
                    "transactional_id, the same on every instance of the pipeline)")
        seen[tid] = index
    return None


def substitute(text: str, env: dict[str, str] | None = None) -> str:
    """Replace ``${VAR}`` and ``${VAR:-default}``; an unset variable without default is an error."""
    env = dict(os.environ) if env is None else env

    def repl(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if env.get(name):
            register_variable(name, env[name])
            return env[name]
        if default is not None:
            return default
        if name in env:
            return env[name]
        raise ConfigError(f"environment variable {name} is not set",
                          fix=f"export {name}=... or write ${{{name}:-default}}")

    return _VAR.sub(repl, text)


def _describe(error: Any, model: type[BaseModel]) -> str:
    where = ".".join(str(p) for p in error["loc"])
    if error["type"] == "extra_forbidden":
        known = _known_fields(model, error["loc"][:-1])
        guess = difflib.get_close_matches(str(error["loc"][-1]), known, n=1)
        hint = f" (did you mean {guess[0]}?)" if guess else f" (known keys: {', '.join(known)})"
        return f"{where}: unknown key{hint}"
    return f"{where}: {error['msg']}"


def _known_fields(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    current: Any = model
    for part in loc:
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return []
        current = field.annotation
    return list(getattr(current, "model_fields", {}))


def validate(model: type[BaseModel], raw: Any, origin: str) -> Any:
    """``raw`` as ``model``, or one ConfigError naming every bad field and the fix. Strict
    where pydantic would coerce silently: a boolean is not a number (``chunk_size: true`` was
    taken as 1), a number is not a boolean, and infinities and NaN are no numbers at all.
    Secrets in ``raw`` are registered first, so no message shows them."""
    register_secrets(raw)
    problems = strict_problems(model, raw)
    if problems:
        raise ConfigError(f"{origin}: {'; '.join(problems)}",
                          fix="see docs/configuration.md for every key")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        details = "; ".join(_describe(e, model) for e in exc.errors())
        raise ConfigError(f"{origin}: {details}",
                          fix="see docs/configuration.md for every key") from None


def load_config(path: str | os.PathLike[str]) -> PipelineConfig:
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {file}: {exc}") from exc
    try:
        raw = yaml.load(substitute(text), Loader=StrictLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file} is not valid YAML: {yaml_problem(exc, text)}",
                          fix="correct the YAML at that line (quote values that hold : # "
                              "or leading special characters)") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: the top level must be a mapping")
    config: PipelineConfig = validate(PipelineConfig, raw, str(file))
    return config
