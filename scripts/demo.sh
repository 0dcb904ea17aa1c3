#!/usr/bin/env bash
# Sets up a fresh machine and runs the demo: a real capture with a concurrent writer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${PYTHON:-python3}" scripts/demo.py "$@"
