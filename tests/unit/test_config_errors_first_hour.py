"""An operator's first mistakes in the configuration file, through ``dblog run``/``check``:
each gives exactly one ``dblog: ...`` message naming the field and the fix, exit status 2,
no traceback, before anything connects or is consumed.

Found by writing plausible wrong files against README and docs/configuration.md: a ZooKeeper
port that is not a number reached kazoo and crashed with a ValueError traceback; a state path
whose folder is missing or cannot be written crashed the API's announcement
(``<state.path>.api.json``) with a FileNotFoundError traceback; two outputs appending to one
file ran silently, each cutting the other's lines back."""

from __future__ import annotations

from pathlib import Path

import pytest

from dblog.api.discovery import FileDirectory
from dblog.app.cli import main
from dblog.app.config import load_config
from dblog.errors import ConfigError, StateError

SOURCE = "source: {type: postgres, dsn: 'host=127.0.0.1 port=1 password=s3cretPW'}\n"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "dblog.yaml"
    path.write_text(SOURCE + text)
    return path


def _refused(tmp_path: Path, text: str, command: str = "run",
             capsys: pytest.CaptureFixture[str] | None = None) -> str:
    """The one message ``dblog <command>`` prints, after checking the exit status."""
    assert capsys is not None
    status = main([command, "-c", str(_write(tmp_path, text))])
    out, err = capsys.readouterr()
    assert status == 2, (out, err)
    assert "Traceback" not in out + err and "s3cretPW" not in out + err
    assert err.count("dblog: ") == 1, err
    return err


OUTPUT = "outputs: [{type: jsonl, path: out.jsonl}]\n"

BAD_HOSTS = [
    ("127.0.0.1:notaport", "port 'notaport' is not a number"),
    ("zk1:2181,", "an empty server"),
    ("zk1:2181,,zk2:2181", "an empty server"),
    ("zk1:99999", "port 99999 is out of range"),
    ("zk1:2181 zk2:2181", "servers are separated by commas"),
    ("zookeeper://zk1:2181", "not a URL"),
]


@pytest.mark.parametrize("hosts,problem", BAD_HOSTS, ids=[h for h, _ in BAD_HOSTS])
def test_bad_zookeeper_hosts_are_refused_when_the_file_is_loaded(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], hosts: str, problem: str) -> None:
    err = _refused(tmp_path, OUTPUT + f"state: {{type: zookeeper, hosts: '{hosts}'}}\n",
                   capsys=capsys)
    assert "state.hosts" in err and problem in err, err
    assert "fix: " in err and "host:port" in err, err


@pytest.mark.parametrize("hosts", ["127.0.0.1:2181", "zk1:2181,zk2:2181,zk3",
                                   "zk1:2181,zk2:2181/dblog/chroot", "[::1]:2181,zk-2.x:2181"])
def test_good_zookeeper_hosts_are_taken(tmp_path: Path, hosts: str) -> None:
    config = load_config(_write(tmp_path, OUTPUT + f"state: {{type: zookeeper, "
                                                   f"hosts: '{hosts}'}}\n"))
    assert config.state.hosts == hosts


def test_a_state_path_that_cannot_be_written_stops_run_with_one_message(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the state folder should be")
    err = _refused(tmp_path, OUTPUT + f"state: {{path: {blocker}/state.json}}\n",
                   capsys=capsys)
    assert "state.path" in err and f"{blocker}/state.json" in err, err
    assert "fix: " in err, err


def test_the_announcement_creates_the_state_folder_like_the_state_store(
        tmp_path: Path) -> None:
    state = tmp_path / "var" / "lib" / "dblog" / "shop-state.json"
    directory = FileDirectory(str(state), "me")
    directory.announce("http://127.0.0.1:1")
    assert directory.leader() is not None
    assert Path(f"{state}.api.json").exists()
    directory.close()
    assert not Path(f"{state}.api.json").exists()


def test_an_announcement_that_cannot_be_written_is_a_state_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StateError) as refused:
        FileDirectory(str(blocker / "state.json"), "me").announce("http://127.0.0.1:1")
    assert "state.path" in refused.value.message and refused.value.fix


CONFLICTS = [
    ("outputs: [{type: jsonl, path: a.jsonl}, {type: jsonl, path: ./a.jsonl}]\n",
     "outputs.1.path"),
    ("outputs: [{type: jsonl}, {type: jsonl, path: '-', format: debezium-json}]\n",
     "outputs.1.path"),
    ("outputs: [{type: delta, path: /tmp/d}, {type: jsonl}, {type: delta, path: /tmp/d/}]\n",
     "outputs.2.path"),
]


@pytest.mark.parametrize("outputs,where", CONFLICTS, ids=[w for _, w in CONFLICTS])
def test_two_outputs_writing_one_place_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], outputs: str, where: str) -> None:
    for command in ("run", "check"):
        err = _refused(tmp_path, outputs, command, capsys=capsys)
        assert where in err and "outputs." in err.split(where, 1)[1], err
        assert "(give each output its own path)" in err and "fix: " in err, err


def test_outputs_in_different_places_are_taken(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, "outputs: [{type: jsonl, path: a.jsonl}, "
                                          "{type: jsonl, path: b.jsonl}, {type: jsonl}, "
                                          "{type: delta, path: d}]\n"))
    assert len(config.outputs) == 4


def test_a_conflict_is_a_config_error_for_embedders_too(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load_config(_write(tmp_path, "outputs: [{type: jsonl}, {type: jsonl}]\n"))


KAFKA = "{type: kafka, bootstrap_servers: 'k:9092', delivery: exactly-once"


@pytest.mark.parametrize("outputs", [
    f"outputs: [{KAFKA}, topic: 'a.{{table}}'}}, {KAFKA}, topic: 'b.{{table}}'}}]\n",
    f"outputs: [{KAFKA}, transactional_id: t}}, {{type: jsonl}}, {KAFKA}, "
    "transactional_id: t}]\n",
])
def test_two_exactly_once_kafka_outputs_with_one_transactional_id_are_refused(
        tmp_path: Path, outputs: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(_write(tmp_path, outputs))
    message = refused.value.message
    assert "transactional_id" in message and "fence" in message, message
    assert "give each its own transactional_id" in message, message


def test_exactly_once_kafka_outputs_with_their_own_ids_are_taken(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, f"outputs: [{KAFKA}, transactional_id: a}}, "
                                          f"{KAFKA}, transactional_id: b}}, "
                                          "{type: kafka, bootstrap_servers: 'k:9092'}]\n"))
    assert len(config.outputs) == 3


@pytest.mark.parametrize("dsn", ["", "   ", "${EMPTY_DSN_FOR_TEST:-}"])
def test_an_empty_postgres_dsn_is_refused_naming_the_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        dsn: str) -> None:
    """libpq reads an empty string as "every default": the local socket, the login name as
    user and database; an unset ``${VAR:-}`` ran against whatever server that found."""
    monkeypatch.chdir(tmp_path)  # the default state path is relative
    path = tmp_path / "dblog.yaml"
    path.write_text(f"source: {{type: postgres, dsn: '{dsn}'}}\noutputs: [{{type: jsonl}}]\n")
    assert main(["run", "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("dblog: ") == 1 and "Traceback" not in err, err
    assert "source.dsn" in err and "is empty" in err and "host=" in err, err
