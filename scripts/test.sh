#!/usr/bin/env bash
# Sets up a fresh machine and runs every test tier. Integration tests start their own servers;
# with DBLOG_REQUIRE_SERVICES=1 a server that cannot start fails the run instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export DBLOG_REQUIRE_SERVICES="${DBLOG_REQUIRE_SERVICES:-1}"
PYTHON="${PYTHON:-python3}"
"$PYTHON" -m ruff check .
"$PYTHON" scripts/typecheck.py
"$PYTHON" -m pytest -q --durations=30 "$@"  # the slowest tests, to keep the wall time in check
