"""Issue 16, finding 3: a password never appears in an error, a log line, a repr, the state or
the output. Every failing path of the issue runs with one known password, and everything they
print, log, store or raise is searched for it (and for its URL-encoded form): zero hits."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from dblog.app.config import load_config
from dblog.app.pipeline import Pipeline
from dblog.connectors.postgres import PostgresConfig, PostgresConnector
from dblog.errors import DblogError

from .pgutil import dump_state, wait_until
from .test_robust_pg import execute

pytestmark = pytest.mark.integration
PASSWORD = "Zq7-Secret-Pw9"


def config_file(tmp: Path, source: str, extra: str = "") -> Path:
    path = tmp / "dblog.yaml"
    path.write_text(f"name: secrets\nsource: {source}\n"
                    f"outputs: [{{type: jsonl, path: '{tmp / 'out.jsonl'}'}}]\n"
                    f"state: {{type: file, path: '{tmp / 'state.json'}'}}\n"
                    f"api: {{enabled: false}}\nlog_level: DEBUG\n{extra}")
    return path


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> str:
    """What the command printed; it fails, or (``dblog run`` retrying a connection that is
    refused) is stopped after ``timeout`` seconds."""
    try:
        done = subprocess.run([sys.executable, "-m", "dblog", *args], capture_output=True,
                              text=True, timeout=timeout, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired as stopped:
        return "".join(_text(part) for part in (stopped.stdout, stopped.stderr))
    assert done.returncode != 0, (args, done.stdout, done.stderr)  # every path here fails
    return done.stdout + done.stderr


def cli_all(calls: list[tuple[list[str], float]]) -> list[str]:
    """:func:`cli` of each ``(args, timeout)``, run at the same time (most of their time is
    spent waiting for refused connections and their retries), outputs in order."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda call: cli(*call[0], timeout=call[1]), calls))


def _text(part: str | bytes | None) -> str:
    return part.decode(errors="replace") if isinstance(part, bytes) else part or ""


def hits(text: str) -> list[str]:
    return [line for line in text.splitlines()
            if PASSWORD in line or PASSWORD.replace("-", "%2D") in line]


def dsn_with_password(dsn: str) -> str:
    return f"{dsn} password={PASSWORD}"


@pytest.fixture()
def seen(tmp_path: Path) -> Iterator[list[str]]:
    """Everything the test saw; searched for the password when it ends."""
    texts: list[str] = []
    yield texts
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".yaml"]
    texts.extend(p.read_text(errors="replace") for p in files)
    found = [h for text in texts for h in hits(text)]
    assert not found, found


def test_failing_commands_print_no_password(tmp_path: Path, seen: list[str]) -> None:
    calls: list[tuple[list[str], float]] = []

    def call(command: str, source: str, timeout: float = 120) -> None:
        folder = tmp_path / f"call{len(calls)}"  # the calls run at the same time
        folder.mkdir()
        calls.append(([command, "--config", str(config_file(folder, source))], timeout))

    for unparseable in (f'"host=127.0.0.1 port=1 user=u password {PASSWORD}"',
                        f'"host=127.0.0.1 port=1 user=u password=ab {PASSWORD}"'):
        for command in ("check", "run", "status"):  # libpq: missing "=" after "<password>"
            call(command, f"{{type: postgres, dsn: {unparseable}}}")
    refused = f"'host=127.0.0.1 port=1 user=u password={PASSWORD} connect_timeout=2'"
    for command in ("check", "run"):  # nothing listens: connection errors
        call(command, f"{{type: postgres, dsn: {refused}}}", timeout=20)
    url = f"'postgresql://u:{PASSWORD}@127.0.0.1:1/db?connect_timeout=2'"
    call("run", f"{{type: postgres, dsn: {url}}}", timeout=20)
    call("check", f"{{type: mysql, dsn: 'mysql://u:{PASSWORD}@127.0.0.1:notaport/'}}")
    call("check", f"{{type: postgres, dsn: 'password={PASSWORD}', slot: 'Bad-Slot'}}")
    outputs = cli_all(calls)
    assert all(outputs), [c for c, o in zip(calls, outputs, strict=True) if not o]
    seen.extend(outputs)


def test_yaml_errors_never_show_a_substituted_password(tmp_path: Path,
                                                       seen: list[str]) -> None:
    broken = config_file(tmp_path, '{type: postgres, dsn: "host=x password=${DB_PASSWORD}"}')
    env = {"DB_PASSWORD": f'{PASSWORD}" oops: ['}  # ends the quoted string: invalid YAML
    output = cli("check", "--config", str(broken), env=env)
    assert "not valid YAML: line 2" in output and "source: {type: postgres" in output, output
    seen.append(output)
    duplicate = config_file(tmp_path, "{type: postgres, dsn: 'host=x password=${DB_PASSWORD}',"
                                      " dsn: 'host=y password=${DB_PASSWORD}'}")
    output = cli("check", "--config", str(duplicate), env={"DB_PASSWORD": PASSWORD})
    assert "given twice" in output, output
    seen.append(output)


def test_reprs_and_exceptions_show_no_password(pg_dsn: str, tmp_path: Path,
                                               seen: list[str],
                                               caplog: pytest.LogCaptureFixture) -> None:
    dsn = dsn_with_password(pg_dsn)
    config = load_config(config_file(tmp_path, f"{{type: postgres, dsn: '{dsn}'}}"))
    seen.extend([repr(config), str(config),
                 repr(PostgresConfig(dsn=dsn)), repr(PostgresConnector({"dsn": dsn}).config)])
    with caplog.at_level(logging.DEBUG):
        for bad in ({"dsn": f"host=x password {PASSWORD}"}, {"dsn": dsn, "slot": "X!"},
                    {"dsn": f"host=x password='{PASSWORD}"}):
            with pytest.raises(DblogError) as raised:
                PostgresConnector(bad)
            seen.extend([str(raised.value), repr(raised.value),
                         "".join(traceback.format_exception(raised.value))])
        execute(pg_dsn, "CREATE TABLE keyless (v int)")  # a refused start, logged
        pipeline = Pipeline.from_config(config)
        with pytest.raises(DblogError) as refused:
            pipeline.start()
        seen.extend([str(refused.value), "".join(traceback.format_exception(refused.value))])
    seen.extend(r.getMessage() + (r.exc_text or "") for r in caplog.records)


def test_a_running_pipeline_stores_and_logs_no_password(
        pg_dsn: str, tmp_path: Path, seen: list[str],
        caplog: pytest.LogCaptureFixture) -> None:
    execute(pg_dsn, "CREATE TABLE t (id int PRIMARY KEY)", "INSERT INTO t VALUES (1), (2)")
    source = f"{{type: postgres, dsn: '{dsn_with_password(pg_dsn)}', slot: secrets}}"
    config = load_config(config_file(tmp_path, source))
    with caplog.at_level(logging.DEBUG):
        pipeline = Pipeline.from_config(config).start()
        try:
            dump_id = pipeline.dump(["public.t"])
            wait_until(lambda: dump_state(pipeline, dump_id) == "done", 60, "the dump")
            status: dict[str, Any] = pipeline.status()
            seen.append(repr(status))
        finally:
            pipeline.stop()
    seen.extend(r.getMessage() + (r.exc_text or "") for r in caplog.records)


def test_refused_requests_a_removed_output_and_damaged_state_show_no_password(
        pg_dsn: str, tmp_path: Path, seen: list[str],
        caplog: pytest.LogCaptureFixture) -> None:
    """The other failing paths of issue 16 with the password in the DSN: refused dump
    requests, the output file removed while running, a damaged state file (run and
    status), key_columns that are not a key (check)."""
    execute(pg_dsn, "CREATE TABLE t (id int PRIMARY KEY, v int)",
            "INSERT INTO t SELECT g, g % 2 FROM generate_series(1, 50) g")
    source = f"{{type: postgres, dsn: '{dsn_with_password(pg_dsn)}', slot: secrets2}}"
    path = config_file(tmp_path, source)
    with caplog.at_level(logging.DEBUG):
        pipeline = Pipeline.from_config(load_config(path)).start()
        try:
            requests: list[Callable[[], str]] = [
                lambda: pipeline.dump(["public.nope"]),
                lambda: pipeline.dump_keys("public.t", [[2**70]]),
                lambda: pipeline.dump_keys("public.t", [[1, 2]])]
            for request in requests:
                with pytest.raises(DblogError) as refused:
                    request()
                seen.extend([str(refused.value), repr(refused.value),
                             "".join(traceback.format_exception(refused.value))])
            wait_until(lambda: (tmp_path / "out.jsonl").exists(), 30, "the output file")
            (tmp_path / "out.jsonl").unlink()
            execute(pg_dsn, "INSERT INTO t VALUES (1000, 0)")
            with pytest.raises(DblogError) as stopped:
                pipeline.join(60)
            assert "was removed" in stopped.value.message
            seen.extend([str(stopped.value), "".join(traceback.format_exception(stopped.value))])
        finally:
            pipeline.request_stop()
    seen.extend(r.getMessage() + (r.exc_text or "") for r in caplog.records)
    (tmp_path / "state.json").write_text("{}")
    for command in ("run", "status"):
        output = cli(command, "--config", str(path), timeout=30)
        assert "state" in output, output
        seen.append(output)
    not_a_key = config_file(tmp_path, source[:-1] + ", key_columns: {public.t: [v]}}")
    output = cli("check", "--config", str(not_a_key))
    assert "not a key" in output, output
    seen.append(output)


def test_a_mariadb_source_and_a_zookeeper_state_that_cannot_be_reached_show_no_password(
        tmp_path: Path, seen: list[str]) -> None:
    mysql = f"{{type: mariadb, dsn: 'mysql://u:{PASSWORD}@127.0.0.1:1/db', server_id: 77}}"
    postgres = f"{{type: postgres, dsn: 'host=127.0.0.1 port=1 password={PASSWORD}'}}"
    zookeeper = config_file(tmp_path, postgres).read_text().replace(
        f"state: {{type: file, path: '{tmp_path / 'state.json'}'}}",
        "state: {type: zookeeper, hosts: '127.0.0.1:1'}")
    zk_path = tmp_path / "zk.yaml"
    zk_path.write_text(zookeeper)
    calls: list[tuple[list[str], float]] = []
    for command in ("check", "run"):
        folder = tmp_path / f"maria-{command}"  # the calls run at the same time
        folder.mkdir()
        calls.append(([command, "--config", str(config_file(folder, mysql))], 10))
    calls += [([command, "--config", str(zk_path)], 10) for command in ("run", "status")]
    outputs = cli_all(calls)
    for output in outputs[:2]:
        assert "127.0.0.1" in output, output  # the failure was reached and reported
    for output in outputs[2:]:
        assert "127.0.0.1(127.0.0.1):1" in output or "zookeeper" in output.lower(), output
    seen.extend(outputs)
