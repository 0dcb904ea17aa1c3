"""The harness's testcontainers path without Docker: which path a fixture takes, the server
settings the containers get, and a Docker probe that answers quickly (dblog/harness/containers.py).
No container is started here."""

from __future__ import annotations

import importlib.util
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from dblog.connectors.mysql import MysqlConfig
from dblog.connectors.mysql.setup import check_binlog
from dblog.harness import containers
from dblog.harness.containers import (
    DockerUnavailable,
    choose_path,
    docker_reachable,
    harness_mode,
    kafka_env,
    mysql_flavor,
    mysql_image,
    mysql_spec,
    postgres_command,
)
from dblog.harness.kafka import BROKER_SETTINGS
from dblog.harness.postgres import HarnessError

ROOT = Path(__file__).resolve().parents[2]


def no_docker() -> bool:
    return False


def docker_up() -> bool:
    return True


def must_not_probe() -> bool:
    raise AssertionError("Docker was probed although the path was already decided")


# -- selection --------------------------------------------------------------------------------

def test_auto_without_docker_takes_the_binaries() -> None:
    assert choose_path("DBLOG_MYSQL_DSN", env={}, reachable=no_docker) == "binaries"
    assert choose_path("DBLOG_PG_DSN", env={"DBLOG_HARNESS": "auto"},
                       reachable=no_docker) == "binaries"


def test_auto_with_docker_takes_the_containers() -> None:
    assert choose_path("DBLOG_MYSQL_DSN", env={}, reachable=docker_up) == "containers"


def test_auto_with_the_real_probe_and_a_closed_docker_host_takes_the_binaries() -> None:
    env = {"DOCKER_HOST": f"tcp://127.0.0.1:{closed_port()}"}
    assert choose_path("DBLOG_MYSQL_DSN", env=env,
                       reachable=lambda: docker_reachable(env=env)) == "binaries"


def test_binaries_never_probes_docker() -> None:
    assert choose_path("DBLOG_KAFKA_BOOTSTRAP", env={"DBLOG_HARNESS": "binaries"},
                       reachable=must_not_probe) == "binaries"


def test_containers_without_docker_is_an_error_naming_the_variable_and_the_fix() -> None:
    with pytest.raises(DockerUnavailable) as caught:
        choose_path("DBLOG_MYSQL_DSN", env={"DBLOG_HARNESS": "containers"}, reachable=no_docker)
    message = str(caught.value)
    assert "DBLOG_HARNESS=containers" in message
    assert "no Docker engine" in message
    assert "DOCKER_HOST=unset" in message
    assert "DBLOG_HARNESS=binaries" in message  # the way out
    assert isinstance(caught.value, HarnessError)


def test_containers_with_docker_takes_the_containers() -> None:
    assert choose_path("DBLOG_PG_DSN", env={"DBLOG_HARNESS": " Containers "},
                       reachable=docker_up) == "containers"


@pytest.mark.parametrize("mode", ["auto", "binaries", "containers"])
def test_an_external_server_wins_over_both_paths(mode: str) -> None:
    env = {"DBLOG_HARNESS": mode, "DBLOG_MYSQL_DSN": "mysql://u:p@db:3306/"}
    assert choose_path("DBLOG_MYSQL_DSN", env=env, reachable=must_not_probe) == "external"


def test_an_empty_external_variable_does_not_count() -> None:
    env = {"DBLOG_PG_DSN": "", "DBLOG_HARNESS": "binaries"}
    assert choose_path("DBLOG_PG_DSN", env=env, reachable=must_not_probe) == "binaries"


def test_an_unknown_mode_is_refused_with_the_choices() -> None:
    with pytest.raises(HarnessError, match="DBLOG_HARNESS='docker' is not one of auto, "
                                           "binaries, containers"):
        harness_mode({"DBLOG_HARNESS": "docker"})
    assert harness_mode({}) == "auto"


def test_the_mysql_image_variable_picks_the_image() -> None:
    assert mysql_image({}) == "mariadb:10.11"
    assert mysql_image({"DBLOG_MYSQL_IMAGE": "mysql:8.4"}) == "mysql:8.4"


# -- server settings --------------------------------------------------------------------------

def as_server_variables(command: list[str]) -> dict[str, str]:
    """What SHOW GLOBAL VARIABLES would report for a server started with ``command``."""
    flags = dict(arg[2:].split("=", 1) for arg in command)
    variables = {key.replace("-", "_"): value for key, value in flags.items()}
    variables["log_bin"] = "ON" if flags.get("log-bin") else "OFF"
    return variables


@pytest.mark.parametrize("image", ["mysql:8.4", "mariadb:10.11"])
def test_the_command_line_passes_the_connectors_binlog_check(image: str) -> None:
    variables = as_server_variables(mysql_spec(image).command)
    assert check_binlog(variables) == []
    assert variables["binlog_format"] == "ROW"
    assert variables["binlog_row_image"] == "FULL"
    assert variables["binlog_row_metadata"] == "FULL"
    # the server's own id must differ from the connector's default replica id
    default_replica_id = MysqlConfig.model_fields["server_id"].default
    assert variables["server_id"] != str(default_replica_id)


def test_the_binlog_check_would_catch_a_wrong_setting() -> None:
    """The check above can fail: change one setting (or drop log-bin) and the connector objects."""
    command = mysql_spec("mysql:8.4").command
    for name, wrong in (("binlog-format", "MIXED"), ("binlog-row-image", "MINIMAL"),
                        ("binlog-row-metadata", "MINIMAL")):
        changed = [f"--{name}={wrong}" if a.startswith(f"--{name}=") else a for a in command]
        findings = check_binlog(as_server_variables(changed))
        assert [f.message for f in findings] == [
            f"{name.replace('-', '_')} is {wrong}, the binlog connector needs "
            f"{'ROW' if name == 'binlog-format' else 'FULL'}"]
    no_log = as_server_variables([a for a in command if not a.startswith("--log-bin=")])
    assert "the binary log is off" in check_binlog(no_log)[0].message


def test_mysql8_has_gtids_on_and_its_own_collation() -> None:
    spec = mysql_spec("mysql:8.4")
    assert "--gtid-mode=ON" in spec.command
    assert "--enforce-gtid-consistency=ON" in spec.command
    assert "--collation-server=utf8mb4_0900_ai_ci" in spec.command
    assert spec.env == {"MYSQL_ALLOW_EMPTY_PASSWORD": "yes"}
    assert spec.port == 3306


def test_mariadb_gets_the_settings_of_the_binaries_harness() -> None:
    from dblog.harness.mariadb import SERVER_SETTINGS

    spec = mysql_spec("mariadb:10.11")
    assert spec.command == [f"--{k}={v}" for k, v in SERVER_SETTINGS.items()]
    assert "--gtid-mode=ON" not in spec.command  # a MySQL-only variable; MariaDB would refuse it
    assert spec.env == {"MARIADB_ALLOW_EMPTY_ROOT_PASSWORD": "1"}


def test_the_mysql8_settings_match_the_compose_service() -> None:
    compose = yaml.safe_load((ROOT / "docker/docker-compose.yml").read_text(encoding="utf-8"))
    service = set(compose["services"]["mysql"]["command"])
    ours = set(mysql_spec("mysql:8.4").command)
    assert service - {"--skip-name-resolve"} <= ours


@pytest.mark.parametrize(("image", "flavor"), [
    ("mariadb:10.11", "mariadb"), ("docker.io/library/mariadb:11.4", "mariadb"),
    ("mariadb@sha256:abc", "mariadb"), ("mysql:8.4", "mysql"), ("mysql", "mysql"),
    ("percona/percona-server:8.0", "mysql"), ("registry:5000/mirror/mysql:8.0", "mysql"),
])
def test_the_flavor_follows_the_image_name(image: str, flavor: str) -> None:
    assert mysql_flavor(image) == flavor


def test_postgres_runs_with_logical_wal_and_unquoted_values() -> None:
    command = postgres_command()
    assert command[0] == "postgres"
    pairs = [command[i + 1] for i in range(1, len(command), 2)]
    assert all(command[i] == "-c" for i in range(1, len(command), 2))
    assert "wal_level=logical" in pairs
    assert "datestyle=ISO, MDY" in pairs  # the conf-file quotes are not passed to -c
    assert containers.postgres_spec().image == "dblog-postgres:15"
    assert (containers.POSTGRES_CONTEXT / "Dockerfile").read_text().count("wal2json") >= 1


def test_kafka_advertises_the_host_port_and_runs_transactions_on_one_node() -> None:
    env = kafka_env("127.0.0.1", 45123)
    assert "PLAINTEXT_HOST://127.0.0.1:45123" in env["KAFKA_ADVERTISED_LISTENERS"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "1"
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_BROKER_SESSION_TIMEOUT_MS"] == BROKER_SETTINGS["broker.session.timeout.ms"]
    spec = containers.kafka_spec("127.0.0.1", 45123)
    assert (spec.port, spec.host_port, spec.image) == (9092, 45123, "apache/kafka:4.1.1")


def test_kafka_settings_match_the_compose_service() -> None:
    compose = yaml.safe_load((ROOT / "docker/docker-compose.yml").read_text(encoding="utf-8"))
    service = {k: str(v) for k, v in compose["services"]["kafka"]["environment"].items()}
    ours = kafka_env("localhost", 9092)
    differ = {k for k in service if k.startswith("KAFKA_") and service[k] != ours.get(k)}
    # compose names its container "kafka"; ours is reached as localhost inside the container
    assert differ == {"KAFKA_CONTROLLER_QUORUM_VOTERS", "KAFKA_ADVERTISED_LISTENERS"}


# -- the Docker probe -------------------------------------------------------------------------

def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture()
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


class FakeDocker(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"ApiVersion": "1.43"}).encode() if self.path.endswith("/version") \
            else b"OK"
        self.send_response(200 if self.path.endswith(("/version", "/_ping")) else 404)
        self.send_header("Content-Type", "application/json" if body != b"OK" else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def fake_docker() -> Iterator[int]:
    """An HTTP server answering the two requests docker-py's ping makes (/version, /_ping)."""
    server = HTTPServer(("127.0.0.1", 0), FakeDocker)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


needs_testcontainers = pytest.mark.skipif(importlib.util.find_spec("testcontainers") is None,
                                          reason="the containers extra is not installed")


@needs_testcontainers
def test_a_closed_docker_host_port_answers_false_quickly() -> None:
    started = time.monotonic()
    assert docker_reachable(env={"DOCKER_HOST": f"tcp://127.0.0.1:{closed_port()}"}) is False
    assert time.monotonic() - started < 3.0


@needs_testcontainers
def test_a_docker_host_that_never_answers_does_not_hang(silent_port: int) -> None:
    started = time.monotonic()
    assert docker_reachable(timeout=0.5,
                            env={"DOCKER_HOST": f"tcp://127.0.0.1:{silent_port}"}) is False
    assert time.monotonic() - started < 2.0


@needs_testcontainers
def test_an_engine_that_answers_the_ping_is_reachable(fake_docker: int) -> None:
    assert docker_reachable(env={"DOCKER_HOST": f"tcp://127.0.0.1:{fake_docker}"}) is True


def test_without_testcontainers_docker_is_never_reachable(
        monkeypatch: pytest.MonkeyPatch, fake_docker: int) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "testcontainers" else real(name, *a))
    assert docker_reachable(env={"DOCKER_HOST": f"tcp://127.0.0.1:{fake_docker}"}) is False


def test_no_docker_host_and_no_socket_is_false_without_a_ping(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(containers, "DOCKER_SOCKET", tmp_path / "docker.sock")
    monkeypatch.setattr(containers, "_ping", lambda *a: pytest.fail("pinged"))
    assert docker_reachable(env={}) is False
