"""Serving the API from the running instance: uvicorn on a thread of its own, the address
announced in the state store (:mod:`dblog.api.discovery`), progress sampled in the background.

::

    server = ApiServer(pipeline, ApiConfig(port=8080)).start()
    ...
    server.stop()

``dblog run`` does this for the pipeline (file state) or the HA candidate (ZooKeeper state).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable

import uvicorn

from dblog.api.app import build_app
from dblog.api.config import ApiConfig, is_loopback
from dblog.api.discovery import Directory, Refreshing
from dblog.api.prom import exposition
from dblog.api.service import ApiError, Service
from dblog.errors import ConfigError, DblogError
from dblog.spi import Control

log = logging.getLogger("dblog.api")
SAMPLE_INTERVAL_S = 1.0


class ApiServer:
    def __init__(self, control: Control, config: ApiConfig, *,
                 directory: Directory | None = None, instance: str | None = None,
                 lag_bytes: Callable[[], int | None] | None = None) -> None:
        self.config = config
        self.token = config.token()
        if self.token is None and not is_loopback(config.host):
            raise ConfigError(f"api.host {config.host!r} is not loopback and no token is set",
                              fix="set api.token_env, or listen on 127.0.0.1")
        self.directory = directory
        self.service = Service(control, directory, timeout=config.request_timeout_s,
                               lag_bytes=lag_bytes, instance=instance)
        self.app = build_app(self.service, self.token, exposition(self.service))
        self._server: uvicorn.Server | None = None
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self.url = ""

    def _bind(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.config.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.config.host, self.config.port))
        except OSError as exc:
            sock.close()
            raise ConfigError(f"api: cannot listen on {self.config.host}:{self.config.port}: "
                              f"{exc.strerror}", fix="pick another api.port (0: any free)") \
                from exc
        sock.listen(256)
        sock.setblocking(False)
        return sock

    def _advertised(self, port: int) -> str:
        host = self.config.advertise_host or self.config.host
        if host in ("0.0.0.0", "::", ""):
            host = socket.gethostname()
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self) -> ApiServer:
        """Listen, serve on a background thread and announce the address."""
        sock = self._bind()
        self.url = self._advertised(sock.getsockname()[1])
        server = uvicorn.Server(uvicorn.Config(
            self.app, log_level="warning", access_log=False, lifespan="off",
            timeout_graceful_shutdown=2, backlog=256))
        self._server = server
        serve = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                                 name="dblog-api", daemon=True)
        sample = threading.Thread(target=self._sample, name="dblog-api-sampler", daemon=True)
        self._threads = [serve, sample]
        serve.start()
        sample.start()
        if self.directory is not None:
            try:
                self.directory.announce(self.url)
            except BaseException:
                self._stop_serving()  # nothing was announced: nothing to withdraw
                raise
        log.info("API at %s (token %s)", self.url, "required" if self.token else "not required")
        return self

    def _sample(self) -> None:
        """Sample dump progress (for rates and ETAs) and keep the announcement alive."""
        while not self._stop.wait(SAMPLE_INTERVAL_S):
            with contextlib.suppress(ApiError, DblogError):
                self.service.dumps(self.service.status(fresh=True))
            if isinstance(self.directory, Refreshing):
                self.directory.refresh()

    def stop(self) -> None:
        self._stop.set()
        if self.directory is not None:
            try:
                self.directory.close()
            except DblogError as exc:
                log.warning("withdrawing the API announcement: %s", exc)
        self._stop_serving()

    def _stop_serving(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.should_exit = True
        for thread in self._threads:
            thread.join(10)
