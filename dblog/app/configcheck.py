"""Strictness of the configuration beyond what the pydantic models say (issue 16):

* YAML with a key given twice in one mapping is refused (the last one silently won);
* a boolean where a number is expected, or a number where a boolean is expected, is refused
  (pydantic's lax mode took ``chunk_size: true`` as 1);
* infinities and NaN (``.inf``, ``.nan``) are refused anywhere;
* a YAML error is reported with its line and column and the line as written in the file, never
  the text after ``${VAR}`` substitution (which may hold a password);
* connection strings and secret-named values are registered with :mod:`dblog.runtime.redact`
  before validation, so no message shows them.

The checks walk the raw mapping along the model's fields, so they hold for every section,
including the sources' and outputs' own models, without changing those models.
"""

from __future__ import annotations

import math
import re
import types
from typing import Any, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from dblog.errors import ConfigError
from dblog.runtime.redact import redact, register_dsn, register_secret

Model = TypeVar("Model", bound=BaseModel)

_SECRET_FIELD = re.compile(r"(?i)password|passwd|secret|token$|sasl_password|api_key")
_DSN_FIELD = re.compile(r"(?i)dsn|conninfo|url|uri|bootstrap")


class StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping."""


def _mapping(loader: StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
            seen.setdefault(key, key_node.start_mark.line)
        except TypeError:  # an unhashable key: the safe loader reports it itself
            continue
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is given twice in one mapping (first at line "
                f"{first + 1})", key_node.start_mark)
    return dict(loader.construct_mapping(node, deep=True))


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def yaml_problem(exc: yaml.YAMLError, original: str) -> str:
    """Where and what, with the line as written in the file (before substitution)."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return redact(type(exc).__name__)
    mark = exc.problem_mark
    lines = original.splitlines()
    line = lines[mark.line] if mark.line < len(lines) else ""
    context = f" ({exc.context})" if exc.context else ""
    return redact(f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}{context}: "
                  f"{line.strip()!r}")


def register_secrets(raw: Any, key: str = "") -> None:
    """Register the passwords of connection strings and secret-named values in ``raw``."""
    if isinstance(raw, dict):
        for name, value in raw.items():
            register_secrets(value, str(name))
    elif isinstance(raw, list):
        for item in raw:
            register_secrets(item, key)
    elif isinstance(raw, str):
        if _SECRET_FIELD.search(key):
            register_secret(raw)
        elif _DSN_FIELD.search(key):
            register_dsn(raw)


def validated(model: type[Model], raw: dict[str, Any], section: str = "source") -> Model:
    """``raw`` (a dict given to the embedded API) as ``model``; a ConfigError naming the fields
    and their problems, never pydantic's own message, which quotes the input (a connection
    string with its password). The secrets in ``raw`` are registered first."""
    register_secrets(raw)
    try:
        return model(**raw)
    except ValidationError as exc:
        details = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                            for e in exc.errors())
        raise ConfigError(f"{section}: {details}", fix="see docs/configuration.md") from None


def strict_problems(model: type[BaseModel], raw: Any, where: str = "") -> list[str]:
    """What pydantic would coerce silently in ``raw`` against ``model``."""
    return [*_non_finite(raw, where), *_kind_problems(model, raw, where)]


def _non_finite(value: Any, where: str) -> list[str]:
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{where or 'value'}: {value} is not a finite number"]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _non_finite(v, _at(where, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _non_finite(v, _at(where, i))]
    return []


def _at(where: str, key: object) -> str:
    return f"{where}.{key}" if where else str(key)


def _kinds(annotation: Any) -> set[Any]:
    """The scalar types and models a field accepts (unions and optionals unpacked; lists
    and tuples of models as ``('list', model)``)."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return {k for arg in get_args(annotation) for k in _kinds(arg)}
    if origin in (list, tuple):
        args = [a for a in get_args(annotation) if a is not Ellipsis]
        return {("list", a) for a in args if isinstance(a, type) and issubclass(a, BaseModel)}
    return {annotation}


def _kind_problems(model: type[BaseModel], raw: Any, where: str) -> list[str]:
    if not isinstance(raw, dict):
        return []
    problems = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        if key not in raw:
            continue
        value, at, kinds = raw[key], _at(where, key), _kinds(field.annotation)
        numeric = bool(kinds & {int, float})
        if isinstance(value, bool) and numeric and bool not in kinds:
            problems.append(f"{at}: {str(value).lower()} is a boolean, not a number")
        elif bool in kinds and not numeric and str not in kinds and \
                isinstance(value, (int, float)) and not isinstance(value, bool):
            problems.append(f"{at}: {value} is a number, not true or false")
        for kind in kinds:
            problems.extend(_nested(kind, value, at))
    return problems


def _nested(kind: Any, value: Any, at: str) -> list[str]:
    if isinstance(kind, tuple) and isinstance(value, list):
        return [p for i, item in enumerate(value)
                for p in _kind_problems(kind[1], item, _at(at, i))]
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return _kind_problems(kind, value, at)
    return []
