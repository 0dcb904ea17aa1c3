"""One redaction function for everything dblog shows: error messages, log lines, reprs.

Secrets reach dblog in connection strings (``password=...``, ``mysql://user:password@...``) and
through environment variables substituted into the configuration. :func:`redact` masks

* every secret registered with :func:`register_secret` (the passwords of the configured
  connection strings, and the values of substituted variables whose names say they are
  secrets), wherever it appears, even cut out of its connection string by a driver's message;
* ``password=...``-like pairs and the password of ``scheme://user:password@host`` URLs, also
  when they were never registered.

:class:`~dblog.errors.DblogError` redacts its message and fix when it is built, so driver
errors wrapped by the adapters are masked where they are raised. Log records are masked when
they are created (:func:`install_log_redaction`, installed once a secret is registered), and
configuration models mask their reprs (:class:`RedactedRepr`).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote, urlsplit

MASK = "***"
MIN_SECRET_CHARS = 4
"""Shorter values are not masked by value (a password "ab" would mask every "ab")."""

_SECRET_NAMES = r"password|passwd|pwd|sslpassword|secret|token|api[_-]?key|sasl[._]password"
_PAIR = re.compile(rf"(?i)\b({_SECRET_NAMES})(\s*[=:]\s*)"
                   r"('(?:[^'\\]|\\.)*'|\"[^\"]*\"|[^\s,;&'\"]+)")
_URL = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^:/@\s]*:)([^@\s]+)(@)")
_SECRET_KEY = re.compile(rf"(?i)(?:{_SECRET_NAMES})")
_SECRET_VAR = re.compile(r"(?i)(pass|secret|token|key|dsn|credential)")

_secrets: set[str] = set()
_lock = threading.Lock()
_installed = False


def register_secret(value: str | None) -> None:
    """Mask ``value`` wherever it appears from now on (and its URL-decoded form)."""
    if not value or len(value) < MIN_SECRET_CHARS:
        return
    with _lock:
        _secrets.update(v for v in (value, unquote(value)) if len(v) >= MIN_SECRET_CHARS)
    install_log_redaction()


def register_dsn(dsn: str | None) -> None:
    """Register the passwords of a connection string (libpq key=value, or a URL)."""
    for secret in dsn_secrets(dsn or ""):
        register_secret(secret)


def register_variable(name: str, value: str) -> None:
    """An environment variable substituted into the configuration: registered when its name
    says it holds a secret (``PGPASSWORD``, ``KAFKA_SASL_SECRET``, ``DB_DSN``...)."""
    if _SECRET_VAR.search(name):
        register_secret(value)
        register_dsn(value)


def dsn_secrets(dsn: str) -> list[str]:
    """The passwords in a connection string, in whatever form they were written."""
    found = [m.group(3).strip("'\"") for m in _PAIR.finditer(dsn)]
    if "://" in dsn:
        try:
            password = urlsplit(dsn.strip()).password
        except ValueError:
            password = None
        if password:
            found.append(password)
        found.extend(m.group(2) for m in _URL.finditer(dsn))
    return found


def redact(text: str) -> str:
    """``text`` with every registered secret and every password-like pair masked."""
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    text = _URL.sub(lambda m: m.group(1) + MASK + m.group(3), text)
    return _PAIR.sub(lambda m: m.group(1) + m.group(2) + MASK, text)


def redact_value(value: Any, key: str = "") -> Any:
    """A copy of ``value`` (dicts, lists, strings) fit to show: secret-named entries masked,
    strings redacted."""
    if isinstance(value, dict):
        return {k: redact_value(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_value(v) for v in value)
    if isinstance(value, str):
        return MASK if key and _SECRET_KEY.fullmatch(key) else redact(value)
    return value


class RedactedRepr:
    """A pydantic model mixin: the repr shows every field redacted (connection strings keep
    their shape, passwords become ``***``)."""

    def __repr_args__(self) -> Iterable[tuple[str | None, Any]]:
        parent: Iterable[tuple[str | None, Any]] = super().__repr_args__()  # type: ignore[misc]
        for name, value in parent:
            yield name, redact_value(value, name or "")


def _redacting_factory(previous: Any) -> Any:
    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record: logging.LogRecord = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is logging's own business
            return record
        record.msg, record.args = redact(message), None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return record

    return factory


def install_log_redaction() -> None:
    """Mask every log record of the process when it is created (any logger, any handler)."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    logging.setLogRecordFactory(_redacting_factory(logging.getLogRecordFactory()))
