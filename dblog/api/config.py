"""The ``api:`` section of the configuration: where the running instance serves its HTTP API,
metrics and status page, and where the bearer token comes from.

Without a token the API controls the pipeline for anyone who can reach it, so it then listens
on loopback only: a non-loopback ``host`` without ``token_env`` is a configuration error.
"""

from __future__ import annotations

import ipaddress
import os

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dblog.errors import ConfigError

LOOPBACK_NAMES = frozenset({"localhost", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) only reaches this machine."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class ApiConfig(BaseModel):
    """``api:`` (all keys optional)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    """Serve the API (``dblog dump``, ``dumps``, ``pause``... and ``status`` talk to it)."""
    host: str = "127.0.0.1"
    """Address to listen on; anything but loopback needs ``token_env``."""
    port: int = Field(0, ge=0, le=65535)
    """Port; 0 picks a free one. The address in use is announced in the state store (next to
    the state file, or in ZooKeeper), which is how the CLI finds the running instance."""
    token_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """Name of the environment variable holding the bearer token (the CLI reads it too)."""
    advertise_host: str | None = None
    """Host name announced to clients (default: ``host``, or this machine's name when
    ``host`` is a wildcard address such as ``0.0.0.0``)."""
    request_timeout_s: float = Field(15.0, gt=0, le=300)
    """How long a control request waits for the engine before answering 504."""

    @model_validator(mode="after")
    def _token_beyond_loopback(self) -> ApiConfig:
        if self.enabled and not is_loopback(self.host) and self.token_env is None:
            raise ValueError(
                f"host {self.host!r} is not a loopback address and no token_env is set: "
                "anyone who reaches it could control the pipeline (set token_env: NAME and "
                "export NAME=<secret>, or listen on 127.0.0.1)")
        return self

    def token(self) -> str | None:
        """The bearer token (None when no ``token_env`` is configured)."""
        if self.token_env is None:
            return None
        value = os.environ.get(self.token_env, "")
        if not value:
            raise ConfigError(f"api.token_env names {self.token_env}, which is not set or empty",
                              fix=f"export {self.token_env}=<secret token>")
        return value
