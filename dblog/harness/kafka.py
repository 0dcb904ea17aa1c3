"""Throwaway Apache Kafka brokers (KRaft mode) from jars in a local folder, for tests and benches.

librdkafka's built-in mock cluster does not fence a second producer with the same
``transactional.id`` and lets a ``read_committed`` consumer see aborted records, so the Kafka
output's exactly-once tests need a real broker. ``scripts/setup.sh`` copies the pinned jars of
``scripts/java/kafka/pom.xml`` (``mvn dependency:copy-dependencies``) into
``~/.cache/dblog/jars/kafka`` (``DBLOG_JARS_DIR`` moves the parent folder,
``DBLOG_KAFKA_CLASSPATH`` names a class path outright). Each node is a combined controller and
broker (``process.roles=broker,controller``) on free loopback ports with its data in a temporary
directory, formatted by ``kafka.tools.StorageTool`` as ``kafka-storage format`` would.

One node by default; three when a test needs replication. Replication factors follow the node
count (1, or 3 with ``min.insync.replicas=2``) so transactions and consumer groups work at once.
:meth:`KafkaCluster.stop_node` / :meth:`KafkaCluster.start_node` take one node down and bring it
back on the same ports and data (a broker outage), :meth:`KafkaCluster.stop` removes everything.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from base64 import urlsafe_b64encode
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dblog.harness.postgres import HarnessError, free_port
from dblog.harness.zookeeper import find_java

MAIN = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
READY_LINE = "Kafka Server started"
"""Logged by KafkaRaftServer once the broker is unfenced and its listeners accept requests."""

BROKER_SETTINGS: dict[str, str] = {
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "3",
    "auto.create.topics.enable": "true",
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "500",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
"""Settings every node gets; docker/docker-compose.yml's kafka service mirrors them. The
internal topics have few partitions because the first transactional producer and the first
consumer group wait for them to be created (50 partitions each by default). A node killed and
started again cannot register until the controller expires its previous session: 4 s instead of
9 s keeps a broker-outage test short. A transaction past its timeout is aborted within 1 s
instead of 10 s (a test lets one time out)."""

BENCH_JVM_OPTS = ["-Xms256m", "-Xmx768m", "-XX:+ExitOnOutOfMemoryError",
                  "-Djava.awt.headless=true"]
"""The JVM as Kafka's own scripts would run it (both JIT compilers, G1): for benchmarks."""
JVM_OPTS = [*BENCH_JVM_OPTS, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
"""The default, for tests: C1 only and the serial collector. Seen here, a node's start cost
2.6-2.8 CPU seconds against 4.3-4.8 with :data:`BENCH_JVM_OPTS`, which matters on two shared
cores; a benchmark passes ``jvm_opts=BENCH_JVM_OPTS`` to :func:`start_kafka`."""

_LOG4J2 = """status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{HH:mm:ss.SSS}} %-5p [%c{{1}}] %m%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


def replication_settings(nodes: int) -> dict[str, str]:
    """Replication for ``nodes`` brokers: everything on one node, or three copies with two in
    sync so one broker can be down without stopping transactions."""
    factor = str(min(nodes, 3))
    isr = "1" if nodes == 1 else "2"
    return {
        "default.replication.factor": factor,
        "min.insync.replicas": isr,
        "offsets.topic.replication.factor": factor,
        "transaction.state.log.replication.factor": factor,
        "transaction.state.log.min.isr": isr,
        "share.coordinator.state.topic.replication.factor": factor,
        "share.coordinator.state.topic.min.isr": isr,
    }


def jars_dir() -> Path:
    """Where scripts/setup.sh puts the jars it fetches with mvn (one subfolder per pom)."""
    return Path(os.environ.get("DBLOG_JARS_DIR") or Path.home() / ".cache" / "dblog" / "jars")


def find_kafka_classpath() -> str:
    """The broker's class path; raises :class:`HarnessError` naming the fix when absent."""
    explicit = os.environ.get("DBLOG_KAFKA_CLASSPATH")
    if explicit:
        return explicit
    folder = jars_dir() / "kafka"
    if not list(folder.glob("kafka_2.13-*.jar")):
        raise HarnessError(f"Apache Kafka jars not found in {folder}; run `bash scripts/setup.sh` "
                           "(fetches them with mvn from scripts/java/kafka/pom.xml)")
    return f"{folder}/*"


def new_cluster_id() -> str:
    """A random cluster id in Kafka's form (16 bytes, URL-safe base64 without padding); like
    ``Uuid.randomUuid`` it never starts with '-' so it cannot read as a command-line flag."""
    while True:
        text = urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


@dataclass
class KafkaNode:
    """One combined controller+broker process of a :class:`KafkaCluster`."""

    node_id: int
    port: int
    controller_port: int
    root: Path
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _log_start: int = field(default=0, repr=False)
    """Size of the (appended) log when this run of the node began: readiness is read past it."""

    @property
    def config(self) -> Path:
        return self.root / "server.properties"

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def started(self) -> bool:
        """True once this run of the node logged :data:`READY_LINE` and accepts connections."""
        if not self.log.exists():
            return False
        with open(self.log, "rb") as log:
            log.seek(self._log_start)
            return READY_LINE.encode() in log.read() and _accepts(self.port)


@dataclass
class KafkaCluster:
    """Running throwaway nodes. Use :func:`start_kafka` to make one."""

    nodes: list[KafkaNode]
    root: Path
    java: str
    classpath: str
    cluster_id: str
    jvm_opts: list[str] = field(default_factory=lambda: list(JVM_OPTS))

    @property
    def bootstrap(self) -> str:
        """``bootstrap.servers`` for clients: every node's client listener."""
        return ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    def start_node(self, index: int, timeout: float = 90.0) -> None:
        """Start (or restart after :meth:`stop_node`) one node and wait until it serves."""
        self._launch(self.nodes[index])
        self._wait_ready([self.nodes[index]], timeout)

    def stop_node(self, index: int, graceful: bool = False) -> None:
        """Take one node down, keeping its data: SIGKILL (a crash) unless ``graceful``, which
        sends SIGTERM and waits for the controlled shutdown."""
        node = self.nodes[index]
        proc = node._proc
        if proc is not None and proc.poll() is None:
            if graceful:
                proc.terminate()
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
            else:
                proc.kill()
            proc.wait(30)
        node._proc = None

    def restart_node(self, index: int, down_s: float = 0.0) -> None:
        self.stop_node(index)
        time.sleep(down_s)
        self.start_node(index)

    def stop(self) -> None:
        """Kill every node and delete the data."""
        for index in range(len(self.nodes)):
            self.stop_node(index)
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, chars: int = 3000) -> str:
        return "\n".join(f"--- node {n.node_id} ---\n{n.log_tail(chars)}" for n in self.nodes)

    def _launch(self, node: KafkaNode) -> None:
        log4j = node.root / "log4j2.properties"
        node._log_start = node.log.stat().st_size if node.log.exists() else 0
        with open(node.root / "stdout.log", "ab") as out:
            node._proc = subprocess.Popen(
                [self.java, *self.jvm_opts, f"-Dlog4j2.configurationFile={log4j}",
                 "-cp", self.classpath, MAIN, str(node.config)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def _wait_ready(self, nodes: list[KafkaNode], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        waiting = list(nodes)
        while waiting and time.monotonic() < deadline:
            for node in list(waiting):
                if node._proc is not None and node._proc.poll() is not None:
                    raise HarnessError(f"Kafka node {node.node_id} exited with "
                                       f"{node._proc.returncode}: {_startup_output(node)}")
                if node.started():
                    waiting.remove(node)
            time.sleep(0.1)
        if waiting:
            raise HarnessError(f"Kafka node(s) {[n.node_id for n in waiting]} not ready in "
                               f"{timeout:.0f} s: {_startup_output(waiting[0])}")

    def __enter__(self) -> KafkaCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _startup_output(node: KafkaNode) -> str:
    stdout = node.root / "stdout.log"
    text = stdout.read_text(errors="replace")[-1500:] if stdout.exists() else ""
    return f"{text}\n{node.log_tail(1500)}"


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _node_config(node: KafkaNode, voters: str, settings: Mapping[str, str]) -> str:
    own = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": voters,
        "listeners": (f"PLAINTEXT://127.0.0.1:{node.port},"
                      f"CONTROLLER://127.0.0.1:{node.controller_port}"),
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(node.root / "data"),
    }
    return "".join(f"{key}={value}\n" for key, value in {**settings, **own}.items())


def _format(java: str, classpath: str, nodes: list[KafkaNode], cluster_id: str) -> None:
    """Format every node's log directory (``kafka-storage format``), in parallel: each run is a
    JVM start of about a second and a half."""
    procs = [subprocess.Popen(
        [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", classpath, STORAGE_TOOL, "format",
         "-t", cluster_id, "-c", str(node.config)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        for node in nodes]
    for node, proc in zip(nodes, procs, strict=True):
        output, _ = proc.communicate(timeout=120)
        if proc.returncode != 0:
            raise HarnessError(f"formatting Kafka node {node.node_id} failed "
                               f"({proc.returncode}): {output.decode(errors='replace')[-2000:]}")


def _make_nodes(root: Path, count: int) -> list[KafkaNode]:
    nodes = []
    for node_id in range(1, count + 1):
        node_root = root / f"node-{node_id}"
        (node_root / "data").mkdir(parents=True)
        nodes.append(KafkaNode(node_id=node_id, port=free_port(), controller_port=free_port(),
                               root=node_root))
    return nodes


def start_kafka(nodes: int = 1, settings: Mapping[str, str] | None = None,
                timeout: float = 90.0, jvm_opts: Sequence[str] = JVM_OPTS) -> KafkaCluster:
    """Format and start ``nodes`` combined controller+broker nodes and wait until every one
    serves; ``settings`` override :data:`BROKER_SETTINGS` and the replication settings. Raises
    :class:`HarnessError` with the fix when it cannot."""
    if nodes < 1:
        raise HarnessError(f"a Kafka cluster needs at least one node, not {nodes}")
    java, classpath = find_java(), find_kafka_classpath()
    root = Path(tempfile.mkdtemp(prefix="dblog-kafka-"))
    cluster = KafkaCluster(nodes=_make_nodes(root, nodes), root=root, java=java,
                           classpath=classpath, cluster_id=new_cluster_id(),
                           jvm_opts=list(jvm_opts))
    try:
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in cluster.nodes)
        merged = {**BROKER_SETTINGS, **replication_settings(nodes), **(settings or {})}
        for node in cluster.nodes:
            node.config.write_text(_node_config(node, voters, merged), encoding="utf-8")
            (node.root / "log4j2.properties").write_text(_LOG4J2.format(log=node.log),
                                                         encoding="utf-8")
        _format(java, classpath, cluster.nodes, cluster.cluster_id)
        for node in cluster.nodes:
            cluster._launch(node)
        cluster._wait_ready(cluster.nodes, timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster
