"""A client of the running instance's API, found through the state store (the CLI's way in).

:func:`locate` reads the announcement of the running instance (the file next to the state
file, or the leader's znode in ZooKeeper); :class:`ApiClient` sends requests with the token
named by ``api.token_env`` and turns error answers into :class:`ApiRequestError` carrying the
server's message and fix. A standby's answer (421) is followed once to the leader it names.
"""

from __future__ import annotations

from typing import Any

import httpx

from dblog.api.discovery import NotRunning, directory_for
from dblog.app.config import PipelineConfig
from dblog.errors import DblogError


class ApiRequestError(DblogError):
    """The API refused a request (4xx) or failed (5xx): the server's words."""

    def __init__(self, status: int, message: str, fix: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.status = status


def locate(config: PipelineConfig) -> dict[str, Any]:
    """The running (leading) instance's announcement: ``api`` URL, ``instance``, ...;
    NotRunning when there is none."""
    directory = directory_for(config)
    try:
        info = directory.leader()
    finally:
        if config.state.type == "zookeeper":
            directory.close()
    if info is None:
        where = "in ZooKeeper" if config.state.type == "zookeeper" else \
            f"next to {config.state.path}"
        raise NotRunning(f"no running instance of {config.name}: none is announced {where}",
                         fix="start it with dblog run")
    if not info.get("api"):
        raise NotRunning(f"the leader {info.get('instance')} announced no API",
                         fix="enable api in its configuration")
    return info


class ApiClient:
    def __init__(self, url: str, token: str | None, timeout: float = 30.0,
                 token_env: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url, self.token_env = url, token_env
        self.http = httpx.Client(base_url=url, headers=headers, timeout=timeout)

    @classmethod
    def for_config(cls, config: PipelineConfig) -> ApiClient:
        return cls(str(locate(config)["api"]), config.api.token(),
                   token_env=config.api.token_env)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        response = self._send(method, path, body)
        if response.status_code == 421:  # a standby: ask the leader it names, once
            leader = (response.json().get("leader") or {}).get("api")
            if leader:
                self.http.base_url = httpx.URL(leader)
                response = self._send(method, path, body)
        if response.status_code >= 400:
            try:
                answer = response.json()
            except ValueError:
                answer = {"detail": response.text}
            raise ApiRequestError(response.status_code, str(answer.get("detail")),
                                  self._fix(response.status_code, answer.get("fix")))
        return response.json()

    def _fix(self, status: int, fix: str | None) -> str | None:
        """The server's fix; for a refused token, what to export for this command."""
        if status != 401:
            return fix
        if self.token_env is None:
            return ("the instance needs a token: set api.token_env in this configuration as "
                    "in the running instance's, and export that variable")
        return (f"export {self.token_env}=<the token the running instance was started with> "
                "(api.token_env)")

    def _send(self, method: str, path: str, body: Any) -> httpx.Response:
        try:
            return self.http.request(method, path, json=body)
        except httpx.TransportError as exc:
            raise NotRunning(f"the instance announced at {self.http.base_url} does not "
                             f"answer ({type(exc).__name__}): it is not running",
                             fix="start it with dblog run") from exc

    def close(self) -> None:
        self.http.close()
