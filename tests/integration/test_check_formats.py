"""``dblog check`` compares what the source logs with what each output's format needs: a
PostgreSQL table under REPLICA IDENTITY DEFAULT has no old row for a debezium-json output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

pytestmark = pytest.mark.integration


def _check(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dblog", "check", "--config", str(config)],
                          capture_output=True, text=True, check=False, timeout=120)


def test_check_says_when_the_source_does_not_log_what_a_format_needs(
        pg_dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE needs (id int PRIMARY KEY, body text)")
    config = tmp_path / "c.yaml"
    source = {"type": "postgres", "dsn": pg_dsn, "slot": "needs", "tables": ["public.needs"]}
    outputs = [{"type": "jsonl", "path": str(tmp_path / "o.jsonl"), "format": "debezium-json"}]
    config.write_text(json.dumps({"name": "needs", "source": source, "outputs": outputs,
                                  "state": {"path": str(tmp_path / "s.json")}}))
    default = _check(config)
    assert default.returncode == 1, default.stdout + default.stderr
    assert "public.needs" in default.stdout and "debezium-json" in default.stdout
    assert "ALTER TABLE public.needs REPLICA IDENTITY FULL" in default.stdout
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE needs REPLICA IDENTITY FULL")
    full = _check(config)
    assert "public.needs: the source logs full old rows, as debezium-json needs" in full.stdout
    assert "the source logs only the key" not in full.stdout
