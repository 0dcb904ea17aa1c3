"""Throwaway MariaDB servers from the Debian package, for tests, the demo and benchmarks.

A server runs on a free loopback port in a temporary directory with the binlog settings the
MySQL connector needs (ROW format, FULL row image, FULL row metadata, GTID strict mode) and is
removed on :meth:`MariadbServer.stop`. ``root`` connects over TCP without a password. As root the
server runs with ``--user=root`` (mariadbd refuses root otherwise).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from dblog.harness.postgres import HarnessError, free_port

SERVER_SETTINGS: dict[str, str] = {
    "log-bin": "mariadb-bin",
    "binlog-format": "ROW",
    "binlog-row-image": "FULL",
    "binlog-row-metadata": "FULL",
    "server-id": "1",
    "gtid-strict-mode": "1",
    "gtid-domain-id": "0",
    "character-set-server": "utf8mb4",
    "collation-server": "utf8mb4_general_ci",
    "default-time-zone": "+00:00",
    "max-connections": "300",
    "innodb-buffer-pool-size": "256M",
    "innodb-flush-log-at-trx-commit": "2",
    "sync-binlog": "0",
    "skip-name-resolve": "1",
    "max-allowed-packet": "64M",
}


def _binary(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
    if path is None:
        raise HarnessError(f"{name} not found; run `sudo bash scripts/setup.sh` "
                           "(installs mariadb-server)")
    return path


@dataclass
class MariadbServer:
    """One running throwaway server. Use :func:`start_mariadb` to make one."""

    port: int
    root: Path
    args: list[str]
    process: subprocess.Popen[bytes] | None = None
    user: str = "root"
    _log: Path = field(default_factory=Path)

    def dsn(self, database: str = "") -> str:
        return f"mysql://{self.user}@127.0.0.1:{self.port}/{database}"

    def restart(self, down_s: float = 0.0, sig: signal.Signals = signal.SIGTERM) -> None:
        """Stop the server (SIGTERM: a clean shutdown; SIGKILL: a crash, recovered on start),
        wait ``down_s`` and start it again on the same port and data directory."""
        self._terminate(sig)
        time.sleep(down_s)
        self._spawn()

    def _spawn(self) -> None:
        with open(self._log, "ab") as log:
            self.process = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)
        _wait_ready(self)

    def _terminate(self, sig: signal.Signals) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.process = None

    def stop(self) -> None:
        self._terminate(signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> MariadbServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _server_args(root: Path, port: int, extra: dict[str, str]) -> list[str]:
    datadir = root / "data"
    args = [_binary("mariadbd"), "--no-defaults", f"--datadir={datadir}",
            f"--socket={root / 'mysqld.sock'}", f"--pid-file={root / 'mysqld.pid'}",
            f"--port={port}", "--bind-address=127.0.0.1", f"--tmpdir={root}",
            f"--log-error={root / 'error.log'}"]
    if os.geteuid() == 0:
        args.append("--user=root")
    args += [f"--{k}={v}" for k, v in {**SERVER_SETTINGS, **extra}.items()]
    return args


def start_mariadb(extra_settings: dict[str, str] | None = None) -> MariadbServer:
    """Start a fresh server; raises :class:`HarnessError` with the fix when it cannot."""
    install = _binary("mariadb-install-db")
    root = Path(tempfile.mkdtemp(prefix="dblog-maria-"))
    init = subprocess.run(
        [install, "--no-defaults", f"--datadir={root / 'data'}", "--auth-root-authentication-"
         "method=normal", "--skip-test-db", *(["--user=root"] if os.geteuid() == 0 else [])],
        capture_output=True, text=True, check=False)
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise HarnessError(f"mariadb-install-db failed: {init.stderr.strip()[-2000:]}")
    port = free_port()
    server = MariadbServer(port=port, root=root,
                           args=_server_args(root, port, extra_settings or {}),
                           _log=root / "server.out")
    try:
        server._spawn()
    except HarnessError:
        server.stop()
        raise
    return server


def _wait_ready(server: MariadbServer, timeout: float = 60.0) -> None:
    """Wait until the server answers a query (the port opens before the grant tables load)."""
    import pymysql  # the harness is only used where the mysql extra is installed

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process is not None and server.process.poll() is not None:
            error = (server.root / "error.log")
            text = error.read_text(errors="replace") if error.exists() else ""
            raise HarnessError(f"mariadbd exited with {server.process.returncode}: {text[-2000:]}")
        try:
            pymysql.connect(host="127.0.0.1", port=server.port, user="root",
                            connect_timeout=1).close()
            return
        except pymysql.err.OperationalError:
            time.sleep(0.1)
    raise HarnessError(f"MariaDB did not accept connections on port {server.port}")
