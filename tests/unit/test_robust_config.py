"""Issue 16, finding 3: the configuration is strict. A boolean is not a number (``chunk_size:
true`` became 1), a number is not a boolean, infinities and NaN are refused, and a key given
twice is an error (the last one silently won); every message names the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from dblog.app.config import load_config, validate
from dblog.errors import ConfigError
from dblog.outputs.jsonl import JsonlConfig

BASE = ("source: {type: postgres, dsn: 'host=x'}\n"
        "outputs: [{type: jsonl, path: out.jsonl}]\n")

REFUSED = [
    ("engine: {chunk_size: true}\n", "engine.chunk_size: true is a boolean"),
    ("engine: {batch_size: false}\n", "engine.batch_size: false is a boolean"),
    ("engine: {flush_interval_s: .inf}\n", "engine.flush_interval_s: inf is not a finite"),
    ("engine: {chunk_delay_s: .nan}\n", "nan is not a finite"),
    ("engine: {poll_timeout_s: -.inf}\n", "-inf is not a finite"),
    ("engine: {chunk_worker: 1}\n", "engine.chunk_worker: 1 is a number"),
    ("state: {session_timeout_s: true}\n", "state.session_timeout_s: true is a boolean"),
    ("api: {port: true}\n", "api.port: true is a boolean"),
    ("initial_dumps: [{tables: [public.a]}, {tables: .inf}]\n",
     "initial_dumps.1.tables: inf is not a finite"),
    ("engine: {chunk_size: 5}\nengine: {chunk_size: 7}\n", "key 'engine' is given twice"),
    ("engine:\n  chunk_size: 5\n  batch_size: 9\n  chunk_size: 7\n",
     "key 'chunk_size' is given twice in one mapping (first at line 4)"),
    ("name: a\nname: b\n", "key 'name' is given twice"),
]


@pytest.mark.parametrize("extra,message", REFUSED, ids=[m for _, m in REFUSED])
def test_lax_values_and_duplicate_keys_are_refused(tmp_path: Path, extra: str,
                                                   message: str) -> None:
    path = tmp_path / "dblog.yaml"
    path.write_text(BASE + extra)
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert message in refused.value.message, refused.value.message
    assert refused.value.fix


def test_a_duplicate_key_inside_the_source_section_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "dblog.yaml"
    path.write_text("source:\n  type: postgres\n  dsn: a\n  dsn: b\n"
                    "outputs: [{type: jsonl}]\n")
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert "key 'dsn' is given twice" in refused.value.message
    assert "line 4" in refused.value.message


@pytest.mark.parametrize("raw,message", [
    ({"type": "jsonl", "fsync": 1}, "fsync: 1 is a number"),
    ({"type": "jsonl", "reset": 0}, "reset: 0 is a number"),
    ({"type": "jsonl", "path": float("nan")}, "not a finite"),
])
def test_sections_built_by_plugins_are_strict_too(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        validate(JsonlConfig, raw, "outputs.0")
    assert message in refused.value.message and refused.value.message.startswith("outputs.0")


def test_ordinary_values_still_load(tmp_path: Path) -> None:
    path = tmp_path / "dblog.yaml"
    path.write_text(BASE + "engine: {chunk_size: 5, flush_interval_s: 1, chunk_worker: false,"
                    " switch_interval_s: null}\nstate: {session_timeout_s: 5}\n"
                    "initial_dumps: [{tables: null}, {tables: [public.a]}]\n")
    config = load_config(path)
    assert config.engine.chunk_size == 5 and config.engine.flush_interval_s == 1.0
    assert config.engine.chunk_worker is False and config.state.session_timeout_s == 5.0
