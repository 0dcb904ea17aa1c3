"""Throwaway PostgreSQL servers from the installed binaries, for tests, the demo and benchmarks.

A server runs on a free loopback port in a temporary directory with ``wal_level=logical`` and
is removed on :meth:`PostgresServer.stop`. When the process runs as root, the server runs as the
``postgres`` system user (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

SERVER_SETTINGS: dict[str, str] = {
    "wal_level": "logical",
    "max_replication_slots": "20",
    "max_wal_senders": "20",
    "max_connections": "200",
    "fsync": "off",
    "full_page_writes": "off",
    "shared_buffers": "256MB",
    "timezone": "UTC",
    "datestyle": "'ISO, MDY'",
    "wal_sender_timeout": "60s",
}


class HarnessError(RuntimeError):
    """A throwaway server could not be started; the message says what is missing."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def find_pg_bindir(version: str | None = None) -> Path:
    """The newest installed PostgreSQL bin directory (or the one for ``version``)."""
    env = os.environ.get("DBLOG_PG_BINDIR")
    if env:
        return Path(env)
    pattern = f"/usr/lib/postgresql/{version or '*'}/bin"
    found = sorted(glob.glob(pattern), key=lambda p: int(p.split("/")[-2]))
    if not found:
        raise HarnessError(
            "no PostgreSQL server binaries found under /usr/lib/postgresql; "
            "run `sudo bash scripts/setup.sh` (installs postgresql-15 and postgresql-15-wal2json)"
        )
    return Path(found[-1])


def _as_server_user() -> list[str]:
    if os.geteuid() != 0:
        return []
    return ["runuser", "-u", "postgres", "--"]


@dataclass
class PostgresServer:
    """One running throwaway server. Use :func:`start_postgres` to make one."""

    port: int
    datadir: Path
    bindir: Path
    user: str = "postgres"
    _root: Path = field(default_factory=Path)

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user={self.user} dbname={dbname}"

    def restart(self, down_s: float = 0.0) -> None:
        """Stop the server (fast shutdown), stay down ``down_s`` seconds, start it again."""
        ctl = [*_as_server_user(), str(self.bindir / "pg_ctl"), "-D", str(self.datadir)]
        subprocess.run([*ctl, "-m", "fast", "-w", "stop"], capture_output=True, check=True)
        time.sleep(down_s)
        subprocess.run([*ctl, "-l", str(self._root / "server.log"), "-w", "-t", "60", "start"],
                       capture_output=True, check=True)
        _wait_for_port(self.port)

    def stop(self) -> None:
        subprocess.run(
            [*_as_server_user(), str(self.bindir / "pg_ctl"), "-D", str(self.datadir),
             "-m", "immediate", "stop"],
            capture_output=True, check=False,
        )
        shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _prepare_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="dblog-pg-"))
    os.chmod(root, 0o755)
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(root, pw.pw_uid, pw.pw_gid)
    return root


def start_postgres(extra_settings: dict[str, str] | None = None) -> PostgresServer:
    """Start a fresh server; raises :class:`HarnessError` with the fix when it cannot."""
    bindir = find_pg_bindir()
    root = _prepare_root()
    datadir = root / "data"
    run = _as_server_user()
    init = subprocess.run(
        [*run, str(bindir / "initdb"), "-D", str(datadir), "-U", "postgres", "--auth=trust",
         "-E", "UTF8", "--locale=C.UTF-8"],
        capture_output=True, text=True, check=False,
    )
    if init.returncode != 0:
        raise HarnessError(f"initdb failed: {init.stderr.strip()}")
    port = free_port()
    settings = {**SERVER_SETTINGS, **(extra_settings or {}), "port": str(port),
                "listen_addresses": "'127.0.0.1'", "unix_socket_directories": f"'{root}'"}
    with open(datadir / "postgresql.conf", "a", encoding="utf-8") as conf:
        for key, value in settings.items():
            conf.write(f"{key} = {value}\n")
    with open(datadir / "pg_hba.conf", "w", encoding="utf-8") as hba:
        hba.write("local all all trust\nhost all all 127.0.0.1/32 trust\n"
                  "host replication all 127.0.0.1/32 trust\nlocal replication all trust\n")
    start = subprocess.run(
        [*run, str(bindir / "pg_ctl"), "-D", str(datadir), "-l", str(root / "server.log"),
         "-w", "-t", "60", "start"],
        capture_output=True, text=True, check=False,
    )
    if start.returncode != 0:
        log_file = root / "server.log"
        log = log_file.read_text(errors="replace") if log_file.exists() else ""
        raise HarnessError(f"pg_ctl start failed: {start.stderr.strip()} {log[-2000:]}")
    _wait_for_port(port)
    return PostgresServer(port=port, datadir=datadir, bindir=bindir, _root=root)


def _wait_for_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise HarnessError(f"PostgreSQL did not accept connections on port {port}")
