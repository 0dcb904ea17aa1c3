"""Where the running instance's API is: each instance announces its address in the state
store's place, and the CLI (and a standby asked for the leader) look it up there.

* file state: a small JSON file next to the state file (``<state.path>.api.json``), written
  when the server starts and removed when it stops;
* ZooKeeper state: an ephemeral znode per instance (``<root>/<name>/api/<instance>``), gone
  with the instance's session; the leader's is found through the ``leader`` znode.

So ``dblog dump``/``status``/... work with any state store, and the API may listen on a port
picked at start (``api.port: 0``), several candidates of one configuration on one host included.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from dblog.app.config import PipelineConfig
from dblog.errors import DblogError, StateError


class Directory(Protocol):
    """Announces this instance's API and finds the leader's."""

    def announce(self, url: str) -> None: ...

    def withdraw(self) -> None: ...

    def leader(self) -> dict[str, Any] | None:
        """The leader: ``instance``, ``epoch``, ``since`` and its ``api`` URL (None if the
        leader announced none, or no instance leads)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Refreshing(Protocol):
    """A directory whose announcement must be renewed now and then (a ZooKeeper session may
    have ended and taken it along)."""

    def refresh(self) -> None: ...


def instance_id(config: PipelineConfig) -> str:
    """This process's instance id, as the election names it."""
    return config.state.instance_id or f"{socket.gethostname()}:{os.getpid()}"


class FileDirectory:
    """The one embedded instance of a file state store."""

    def __init__(self, state_path: str, instance: str) -> None:
        self.state_path = state_path
        self.path = Path(f"{state_path}.api.json")
        self.instance = instance
        self.info: dict[str, Any] | None = None

    def announce(self, url: str) -> None:
        self.info = {"instance": self.instance, "api": url, "pid": os.getpid(),
                     "since": time.time(), "epoch": 0}
        partial = self.path.with_name(self.path.name + ".partial")
        try:  # the folder is made as the state store makes it: the API starts first
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps(self.info), encoding="utf-8")
            os.replace(partial, self.path)
        except OSError as exc:
            raise StateError(
                f"state.path {self.state_path}: cannot write the API's announcement "
                f"{self.path} next to it: {exc.strerror or exc}",
                fix=f"set state.path to a file in a folder the user that runs dblog can write, "
                    f"or create {self.path.parent} and give that user write access") from exc

    def withdraw(self) -> None:
        current = read_file_announcement(self.path)
        if current is not None and current.get("pid") == os.getpid():
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        self.info = None

    def leader(self) -> dict[str, Any] | None:
        return self.info or read_file_announcement(self.path)

    def close(self) -> None:
        self.withdraw()


def read_file_announcement(path: Path) -> dict[str, Any] | None:
    try:
        info: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    return info


class ZooKeeperDirectory:
    """Announcements in ZooKeeper, on a client (session) of their own."""

    def __init__(self, config: PipelineConfig, instance: str | None = None) -> None:
        from dblog.ha.zk import ZkPaths, connect

        state = config.state
        assert state.hosts is not None  # validated by StateConfig
        self.client = connect(state.hosts, state.session_timeout_s, state.connect_timeout_s)
        self.paths = ZkPaths.of(state.root, config.name)
        self.base = f"{self.paths.base}/api"
        self.instance = instance
        self.url: str | None = None
        self._lock = threading.Lock()

    def announce(self, url: str) -> None:
        self.url = url
        self.refresh()

    def refresh(self) -> None:
        """(Re)create this instance's znode: it goes with the session, say after an outage."""
        from kazoo.exceptions import KazooException, NodeExistsError

        if self.url is None or self.instance is None:
            return
        data = json.dumps({"instance": self.instance, "api": self.url, "pid": os.getpid()})
        with self._lock, contextlib.suppress(NodeExistsError, KazooException):
            if self.client.exists(self._node()) is None:
                self.client.create(self._node(), data.encode(), ephemeral=True, makepath=True)

    def _node(self) -> str:
        return f"{self.base}/{(self.instance or '').replace('/', '_')}"

    def withdraw(self) -> None:
        from kazoo.exceptions import KazooException, NoNodeError

        self.url = None
        with contextlib.suppress(NoNodeError, KazooException):
            self.client.delete(self._node())

    def leader(self) -> dict[str, Any] | None:
        from kazoo.exceptions import NoNodeError

        from dblog.ha.election import read_leader
        from dblog.ha.zk import classified

        with classified("reading the leader"):
            info = read_leader(self.client, self.paths)
            if info is None:
                return None
            try:
                raw, _ = self.client.get(f"{self.base}/{str(info['instance']).replace('/', '_')}")
                info["api"] = json.loads(raw.decode("utf-8"))["api"]
            except NoNodeError:
                info["api"] = None
        return info

    def close(self) -> None:
        self.withdraw()
        self.client.stop()
        self.client.close()


def directory_for(config: PipelineConfig, instance: str | None = None) -> Directory:
    """The directory of ``config``'s state store (``instance``: this process, to announce)."""
    if config.state.type == "zookeeper":
        return ZooKeeperDirectory(config, instance)
    return FileDirectory(config.state.path, instance or "")


class NotRunning(DblogError):
    """No running instance announced an API (or it does not answer)."""
