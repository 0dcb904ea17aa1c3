"""Throwaway servers in Docker containers (testcontainers), the harness's second path.

When it is taken: ``DBLOG_HARNESS=auto`` (the default) takes it when :func:`docker_reachable`
says a Docker engine answers and starts the Debian binaries (``mariadb.py``, ``postgres.py``,
``kafka.py``) otherwise; ``binaries`` always starts the binaries; ``containers`` insists on Docker
and raises :class:`DockerUnavailable`, naming the fix, without one. An external server named by
the fixture's own variable (``DBLOG_MYSQL_DSN``, ``DBLOG_PG_DSN``, ``DBLOG_KAFKA_BOOTSTRAP``)
wins over both (:func:`choose_path`).

What it starts: MySQL 8 (``mysql:8.4``) or MariaDB (``mariadb:10.11``), picked by
``DBLOG_MYSQL_IMAGE``, with the binlog settings the MySQL connector's start-up check asks for;
PostgreSQL 15 with wal2json built from ``docker/postgres/Dockerfile``; one Apache Kafka KRaft node
(``apache/kafka``) with ``kafka.py``'s broker settings. Each start function returns an object
shaped like the binaries' one (``dsn()`` / ``bootstrap`` and ``stop()``). The settings are plain
data and functions that unit tests check without Docker; testcontainers is imported only when a
container starts. No restart/outage helpers: tests that restart a server start it themselves
from the binaries harness.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dblog.harness.kafka import BROKER_SETTINGS, replication_settings
from dblog.harness.mariadb import SERVER_SETTINGS as MARIADB_SETTINGS
from dblog.harness.postgres import SERVER_SETTINGS as POSTGRES_SETTINGS
from dblog.harness.postgres import HarnessError, free_port

if TYPE_CHECKING:
    from testcontainers.core.container import DockerContainer

HARNESS_VAR = "DBLOG_HARNESS"
IMAGE_VAR = "DBLOG_MYSQL_IMAGE"
MODES = ("auto", "binaries", "containers")
MYSQL8_IMAGE = "mysql:8.4"  # DBLOG_MYSQL_IMAGE=mysql:8.4 runs the MariaDB suites on MySQL 8
DEFAULT_MYSQL_IMAGE = "mariadb:10.11"  # the binaries path's server, so both paths match
KAFKA_IMAGE = "apache/kafka:4.1.1"  # the version of scripts/java/kafka/pom.xml
KAFKA_READY_LINE = "Kafka Server started"
POSTGRES_TAG = "dblog-postgres:15"
POSTGRES_CONTEXT = Path(__file__).resolve().parents[2] / "docker" / "postgres"
DOCKER_SOCKET = Path("/var/run/docker.sock")
START_TIMEOUT_S = 180.0

MYSQL8_SETTINGS: dict[str, str] = {
    "server-id": "1",
    "log-bin": "mysql-bin",
    "binlog-format": "ROW",
    "binlog-row-image": "FULL",
    "binlog-row-metadata": "FULL",
    "gtid-mode": "ON",
    "enforce-gtid-consistency": "ON",
    "character-set-server": "utf8mb4",
    "collation-server": "utf8mb4_0900_ai_ci",
    "default-time-zone": "+00:00",
    "max-connections": "300",
    "innodb-flush-log-at-trx-commit": "2",
    "sync-binlog": "0",
    "skip-name-resolve": "ON",
    "max-allowed-packet": "64M",
}
"""docker-compose.yml's ``mysql`` flags: the binlog settings connectors/mysql/setup.py checks,
GTIDs on, server id 1 (not the connector's default ``source.server_id``, 5401)."""

HarnessPath = Literal["external", "containers", "binaries"]


class DockerUnavailable(HarnessError):
    """``DBLOG_HARNESS=containers`` was asked for and no Docker engine answered."""


@dataclass(frozen=True)
class ContainerSpec:
    """What to run: image, command, environment and the port clients use inside it."""

    image: str
    command: list[str]
    env: dict[str, str]
    port: int
    host_port: int | None = None  # bind to this host port (Kafka must know it up front)


def _ping(result: list[bool], timeout: float, env: Mapping[str, str]) -> None:
    try:
        docker: Any = importlib.import_module("docker")
        client = docker.from_env(timeout=timeout, environment=dict(env))
        try:
            result.append(bool(client.ping()))
        finally:
            client.close()
    except Exception:
        result.append(False)


def docker_reachable(timeout: float = 2.0, env: Mapping[str, str] | None = None) -> bool:
    """True when testcontainers is installed and a Docker engine answers a ping within
    ``timeout`` seconds (``DOCKER_HOST``, else ``/var/run/docker.sock``). Never blocks longer:
    the ping runs in a daemon thread that is abandoned when it does not answer in time."""
    env = os.environ if env is None else env
    if importlib.util.find_spec("testcontainers") is None:
        return False
    if not env.get("DOCKER_HOST") and not DOCKER_SOCKET.exists():
        return False
    result: list[bool] = []
    thread = threading.Thread(target=_ping, args=(result, timeout, env), daemon=True,
                              name="dblog-docker-ping")
    thread.start()
    thread.join(timeout + 0.5)
    return bool(result and result[0])


def harness_mode(env: Mapping[str, str] | None = None) -> str:
    """``DBLOG_HARNESS`` (``auto`` when unset); an unknown value is a :class:`HarnessError`."""
    env = os.environ if env is None else env
    mode = (env.get(HARNESS_VAR) or "auto").strip().lower()
    if mode not in MODES:
        raise HarnessError(f"{HARNESS_VAR}={env.get(HARNESS_VAR)!r} is not one of "
                           f"{', '.join(MODES)}")
    return mode


def choose_path(external_var: str | None, env: Mapping[str, str] | None = None,
                reachable: Callable[[], bool] = docker_reachable) -> HarnessPath:
    """Which server a session fixture uses: ``external`` when ``external_var`` is set, else
    ``containers`` or ``binaries`` by :func:`harness_mode` and ``reachable()``."""
    env = os.environ if env is None else env
    if external_var and env.get(external_var):
        return "external"
    mode = harness_mode(env)
    if mode == "binaries":
        return "binaries"
    if reachable():
        return "containers"
    if mode == "containers":
        raise DockerUnavailable(
            f"{HARNESS_VAR}=containers but no Docker engine answered (DOCKER_HOST="
            f"{env.get('DOCKER_HOST') or 'unset'}, {DOCKER_SOCKET}"
            f"{' present' if DOCKER_SOCKET.exists() else ' missing'}, testcontainers "
            f"{'installed' if importlib.util.find_spec('testcontainers') else 'missing'}); "
            f"start Docker or point DOCKER_HOST at an engine and pip install -e '.[containers]', "
            f"or set {HARNESS_VAR}=binaries (or auto) to use the Debian binaries")
    return "binaries"


def mysql_image(env: Mapping[str, str] | None = None) -> str:
    return (os.environ if env is None else env).get(IMAGE_VAR) or DEFAULT_MYSQL_IMAGE


def mysql_flavor(image: str) -> Literal["mariadb", "mysql"]:
    """``mariadb`` for a MariaDB image (``mariadb:10.11``, ``docker.io/library/mariadb``),
    ``mysql`` for anything else (``mysql:8.4``, ``percona/percona-server:8.0``)."""
    repository = image.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]
    return "mariadb" if repository.lower().startswith("mariadb") else "mysql"


def server_flags(settings: Mapping[str, str]) -> list[str]:
    return [f"--{key}={value}" for key, value in settings.items()]


def mysql_spec(image: str) -> ContainerSpec:
    """MySQL 8 or MariaDB with the connector's binlog settings; root without a password over
    TCP, as the binaries harness has it."""
    if mysql_flavor(image) == "mariadb":
        return ContainerSpec(image, server_flags(MARIADB_SETTINGS),
                             {"MARIADB_ALLOW_EMPTY_ROOT_PASSWORD": "1"}, 3306)
    return ContainerSpec(image, server_flags(MYSQL8_SETTINGS),
                         {"MYSQL_ALLOW_EMPTY_PASSWORD": "yes"}, 3306)


def postgres_command(settings: Mapping[str, str] = POSTGRES_SETTINGS) -> list[str]:
    """``postgres -c key=value ...``; the conf-file quotes of the binaries' settings dropped."""
    command = ["postgres"]
    for key, value in settings.items():
        command += ["-c", f"{key}={value.strip(chr(39))}"]
    return command


def postgres_spec(image: str = POSTGRES_TAG) -> ContainerSpec:
    env = {"POSTGRES_HOST_AUTH_METHOD": "trust",
           "POSTGRES_INITDB_ARGS": "--encoding=UTF8 --locale=C.UTF-8"}
    return ContainerSpec(image, postgres_command(), env, 5432)


def kafka_env(advertised_host: str, host_port: int) -> dict[str, str]:
    """The apache/kafka image's environment: one combined KRaft node, a listener for the host
    advertised as ``advertised_host:host_port``, and kafka.py's broker and replication settings
    (``KAFKA_`` + the property upper-cased, dots as underscores)."""
    env = {
        "CLUSTER_ID": "1FHEbdrrT9iGC03J4sftZQ",
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_LISTENERS": "PLAINTEXT://:29092,CONTROLLER://:9093,PLAINTEXT_HOST://:9092",
        "KAFKA_ADVERTISED_LISTENERS":
            f"PLAINTEXT://localhost:29092,PLAINTEXT_HOST://{advertised_host}:{host_port}",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":
            "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,PLAINTEXT_HOST:PLAINTEXT",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_INTER_BROKER_LISTENER_NAME": "PLAINTEXT",
    }
    for key, value in {**BROKER_SETTINGS, **replication_settings(1)}.items():
        env["KAFKA_" + key.upper().replace(".", "_")] = value
    return env


def kafka_spec(advertised_host: str, host_port: int, image: str = KAFKA_IMAGE) -> ContainerSpec:
    return ContainerSpec(image, [], kafka_env(advertised_host, host_port), 9092, host_port)


@dataclass
class RunningContainer:
    """A started container and where the host reaches its client port."""

    container: DockerContainer
    host: str
    port: int

    def stop(self) -> None:
        with contextlib.suppress(Exception):  # gone already; Ryuk removes leftovers anyway
            self.container.stop()

    def logs_tail(self, chars: int = 2000) -> str:
        try:
            out, err = self.container.get_logs()
        except Exception as exc:
            return f"(no logs: {exc})"
        return (out + err).decode(errors="replace")[-chars:]


def _host_ip(host: str) -> str:
    return "127.0.0.1" if host == "localhost" else host


def run_container(spec: ContainerSpec) -> RunningContainer:
    """Start ``spec``'s container (pulling the image when missing); raises HarnessError."""
    from testcontainers.core.container import DockerContainer

    container = DockerContainer(spec.image)
    for key, value in spec.env.items():
        container.with_env(key, value)
    if spec.command:
        container.with_command(spec.command)
    if spec.host_port is None:
        container.with_exposed_ports(spec.port)
    else:
        container.with_bind_ports(spec.port, spec.host_port)
    try:
        container.start()
        host = _host_ip(container.get_container_host_ip())
        port = spec.host_port or container.get_exposed_port(spec.port)
    except Exception as exc:
        with contextlib.suppress(Exception):
            container.stop()
        raise HarnessError(f"could not start a {spec.image} container: {exc}") from exc
    return RunningContainer(container, host, int(port))


def _wait(running: RunningContainer, ready: Callable[[], bool], what: str,
          timeout: float = START_TIMEOUT_S) -> None:
    """Poll ``ready()`` until it holds; stop the container and raise when it exits or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        try:
            running.container.reload()
            if running.container.status in ("exited", "dead"):
                break
        except Exception:  # the engine went away: report with what logs there are
            break
        time.sleep(0.5)
    tail = running.logs_tail()
    running.stop()
    raise HarnessError(f"{what} container did not become ready: {tail}")


@dataclass
class MysqlContainer:
    """MySQL 8 or MariaDB in a container; :meth:`dsn` as :class:`MariadbServer` has it."""

    running: RunningContainer
    image: str
    user: str = "root"

    @property
    def port(self) -> int:
        return self.running.port

    def dsn(self, database: str = "") -> str:
        return f"mysql://{self.user}@{self.running.host}:{self.port}/{database}"

    def stop(self) -> None:
        self.running.stop()


def _mysql_answers(host: str, port: int) -> bool:
    import pymysql

    try:
        pymysql.connect(host=host, port=port, user="root", connect_timeout=2).close()
        return True
    except pymysql.err.MySQLError:
        return False


def start_mysql(image: str | None = None) -> MysqlContainer:
    """Start ``image`` (default :func:`mysql_image`) and wait until root can log in (the image's
    first-start initialisation runs a server without networking, then restarts it)."""
    image = image or mysql_image()
    running = run_container(mysql_spec(image))
    _wait(running, lambda: _mysql_answers(running.host, running.port), image)
    return MysqlContainer(running, image)


@dataclass
class PostgresContainer:
    """PostgreSQL with wal2json in a container; :meth:`dsn` as :class:`PostgresServer` has it."""

    running: RunningContainer
    user: str = "postgres"

    @property
    def port(self) -> int:
        return self.running.port

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host={self.running.host} port={self.port} user={self.user} dbname={dbname}"

    def stop(self) -> None:
        self.running.stop()


def _postgres_answers(dsn: str) -> bool:
    import psycopg

    try:
        psycopg.connect(dsn, connect_timeout=2).close()
        return True
    except psycopg.Error:
        return False


def build_postgres_image(context: Path = POSTGRES_CONTEXT, tag: str = POSTGRES_TAG) -> str:
    """Build docker/postgres/Dockerfile (kept afterwards: Docker's cache makes a rebuild cheap)."""
    if not (context / "Dockerfile").exists():
        raise HarnessError(f"{context / 'Dockerfile'} not found: the containers path needs a "
                           "source checkout of dblog")
    from testcontainers.core.image import DockerImage

    try:
        DockerImage(path=context, tag=tag, clean_up=False).build()
    except Exception as exc:
        raise HarnessError(f"could not build {tag} from {context}: {exc}") from exc
    return tag


def start_postgres_container() -> PostgresContainer:
    """Build the wal2json image, start it with the binaries' settings (wal_level=logical)."""
    running = run_container(postgres_spec(build_postgres_image()))
    server = PostgresContainer(running)
    _wait(running, lambda: _postgres_answers(server.dsn()), "PostgreSQL")
    return server


@dataclass
class KafkaContainer:
    """One KRaft node in a container; :attr:`bootstrap` as :class:`KafkaCluster` has it."""

    running: RunningContainer

    @property
    def bootstrap(self) -> str:
        return f"{self.running.host}:{self.running.port}"

    def stop(self) -> None:
        self.running.stop()


def start_kafka_container(image: str = KAFKA_IMAGE) -> KafkaContainer:
    """Start one node on a host port chosen first (the broker advertises it), wait until ready."""
    from testcontainers.core.docker_client import DockerClient

    try:
        advertised = _host_ip(DockerClient().host())
    except Exception as exc:
        raise HarnessError(f"no Docker client: {exc}") from exc
    running = run_container(kafka_spec(advertised, free_port(), image))
    server = KafkaContainer(running)
    _wait(running, lambda: KAFKA_READY_LINE in running.logs_tail(1_000_000), "Kafka")
    return server
