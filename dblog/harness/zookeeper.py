"""Throwaway ZooKeeper servers from the Debian ``zookeeper`` package, for tests and benchmarks.

A standalone server (``org.apache.zookeeper.server.ZooKeeperServerMain``) runs on a free
loopback port with a temporary data directory. The Debian package installs no service of its
own (``zookeeperd`` would), so nothing collides with it. ``/usr/share/java/zookeeper.jar``
names its dependencies in its manifest's Class-Path, so it is the whole class path.

:meth:`ZooKeeperServer.stop_server` / :meth:`start_server` take the server down and bring it
back on the same port and data directory (sessions survive an outage shorter than their
timeout, as with a real restart).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from dblog.harness.postgres import HarnessError, free_port

ZK_JAR = "/usr/share/java/zookeeper.jar"
MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
SLF4J_SIMPLE = "/usr/share/java/slf4j-simple.jar"
TICK_MS = 250
"""Session timeouts must lie between 2 and 20 ticks unless set; the config below widens it."""


def find_java() -> str:
    for candidate in (os.environ.get("DBLOG_JAVA"), shutil.which("java"),
                      "/usr/lib/jvm/default-java/bin/java"):
        if candidate and Path(candidate).exists():
            return candidate
    raise HarnessError("no java found; run `sudo bash scripts/setup.sh` "
                       "(installs zookeeper and default-jre-headless)")


def find_classpath() -> str:
    classpath = os.environ.get("DBLOG_ZK_CLASSPATH", ZK_JAR)
    if not all(Path(p).exists() for p in classpath.split(":")):
        raise HarnessError(f"ZooKeeper jars not found ({classpath}); run `sudo bash "
                           "scripts/setup.sh` (installs the zookeeper Debian package)")
    if Path(SLF4J_SIMPLE).exists():  # server.log gets the server's own log when present
        classpath = f"{classpath}:{SLF4J_SIMPLE}"
    return classpath


def _config(port: int, datadir: Path) -> str:
    return "\n".join([
        f"tickTime={TICK_MS}",
        f"dataDir={datadir}",
        f"clientPort={port}",
        "clientPortAddress=127.0.0.1",
        "admin.enableServer=false",
        "minSessionTimeout=500",
        "maxSessionTimeout=60000",
        "4lw.commands.whitelist=ruok,srvr,stat,mntr",
        "forceSync=no",
        "",
    ])


@dataclass
class ZooKeeperServer:
    """One running throwaway server. Use :func:`start_zookeeper` to make one."""

    port: int
    root: Path
    java: str
    classpath: str
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start_server(self, timeout: float = 60.0) -> None:
        log = open(self.root / "server.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            self._proc = subprocess.Popen(
                [self.java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                 "-Dorg.slf4j.simpleLogger.showDateTime=true",
                 "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
                 "-cp", self.classpath, MAIN, str(self.root / "zoo.cfg")],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        finally:
            log.close()
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise HarnessError(f"ZooKeeper exited with {self._proc.returncode}: "
                                   f"{self.log_tail()}")
            # ruok answers before the server takes sessions; srvr reports a Mode once it does
            if b"Mode:" in (four_letter(self.port, b"srvr") or b""):
                return
            time.sleep(0.1)
        self.stop_server()
        raise HarnessError(f"ZooKeeper did not answer on port {self.port}: {self.log_tail()}")

    def stop_server(self) -> None:
        """Kill the server (its data directory stays for :meth:`start_server`)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(30)
        self._proc = None

    def restart(self, down_s: float = 0.0) -> None:
        self.stop_server()
        time.sleep(down_s)
        self.start_server()

    def stop(self) -> None:
        self.stop_server()
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, chars: int = 2000) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def __enter__(self) -> ZooKeeperServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def four_letter(port: int, word: bytes, timeout: float = 1.0) -> bytes | None:
    """Send a four-letter command; None when the server does not answer."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(word)
            chunks = []
            while True:
                data = sock.recv(4096)
                if not data:
                    break
                chunks.append(data)
            return b"".join(chunks)
    except OSError:
        return None


def start_zookeeper() -> ZooKeeperServer:
    """Start a fresh standalone server; raises :class:`HarnessError` with the fix when it
    cannot."""
    java, classpath = find_java(), find_classpath()
    root = Path(tempfile.mkdtemp(prefix="dblog-zk-"))
    (root / "data").mkdir()
    port = free_port()
    (root / "zoo.cfg").write_text(_config(port, root / "data"), encoding="utf-8")
    server = ZooKeeperServer(port=port, root=root, java=java, classpath=classpath)
    try:
        server.start_server()
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return server
