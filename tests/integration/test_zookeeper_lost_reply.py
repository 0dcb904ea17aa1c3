"""The election transaction applied by ZooKeeper but its reply lost (a connection drop at that
moment): the candidate's session reconnects, owns the new ``leader`` znode and must lead."""

from __future__ import annotations

import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import suppress

import pytest
from kazoo.client import KazooClient

from dblog.ha.election import ZooKeeperElection, read_leader
from dblog.ha.zk import ZkPaths
from dblog.runtime.clock import SystemClock

pytestmark = pytest.mark.integration
MULTI = 14  # ZooKeeper's opcode of a transaction


class LosingProxy:
    """Forwards to ZooKeeper; when armed, passes the next multi to the server, then cuts the
    connection without forwarding anything more to the client (the reply is lost)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.hosts = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.armed = threading.Event()
        self.cuts = 0
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            cut = threading.Event()
            self.sockets += [client, server]
            threading.Thread(target=self._up, args=(client, server, cut), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, cut), daemon=True).start()

    @staticmethod
    def _read(sock: socket.socket, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError
            buf += chunk
        return buf

    def _up(self, client: socket.socket, server: socket.socket, cut: threading.Event) -> None:
        first = True  # the connect request has no opcode
        try:
            while True:
                head = self._read(client, 4)
                body = self._read(client, struct.unpack(">i", head)[0])
                lose = not first and struct.unpack(">ii", body[:8])[1] == MULTI \
                    and self.armed.is_set()
                first = False
                if lose:
                    cut.set()
                    self.armed.clear()
                server.sendall(head + body)
                if lose:
                    time.sleep(0.3)  # let the server apply it; its reply is never forwarded
                    self.cuts += 1
                    break
        except OSError:  # ConnectionError too
            pass
        self._close(client, server)

    def _down(self, server: socket.socket, client: socket.socket, cut: threading.Event) -> None:
        try:
            while data := server.recv(65536):
                if not cut.is_set():
                    client.sendall(data)
        except OSError:
            pass
        self._close(client, server)

    @staticmethod
    def _close(*socks: socket.socket) -> None:
        for s in socks:
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self._close(*self.sockets)


@pytest.fixture()
def proxy(zk_hosts: str) -> Iterator[LosingProxy]:
    host, _, port = zk_hosts.split(",")[0].split("/")[0].rpartition(":")
    made = LosingProxy((host, int(port)))
    yield made
    made.close()


def test_a_lost_reply_to_the_election_transaction_still_elects(proxy: LosingProxy) -> None:
    paths = ZkPaths.of("/lost-reply-test", uuid.uuid4().hex[:10])
    client = KazooClient(hosts=proxy.hosts, timeout=3.0, connection_retry={
        "max_tries": -1, "delay": 0.1, "max_delay": 1.0})
    client.start(10)
    election = ZooKeeperElection(client, paths, SystemClock(), session_timeout_s=3.0,
                                 instance_id="a")
    result: list[int | None] = []
    stop = threading.Event()
    proxy.armed.set()
    thread = threading.Thread(target=lambda: result.append(election.campaign(stop)),
                              daemon=True)
    thread.start()
    try:
        thread.join(4.0)  # well under the session timeout plus the reconnect
        assert proxy.cuts == 1, "the proxy did not cut the election transaction's reply"
        assert result == [1], "the candidate owns the leader znode but still campaigns"
        assert election.is_leader() and election.epoch == 1
        leader = read_leader(client, paths)
        assert leader is not None and leader["instance"] == "a" and leader["epoch"] == 1
        _, stat = client.get(paths.leader)
        assert client.client_id is not None and stat.ephemeralOwner == client.client_id[0]
    finally:
        stop.set()
        thread.join(5)
        election.close()
        client.stop()
        client.close()
