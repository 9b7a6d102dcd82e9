#!/usr/bin/env bash
# The project's checks, the same here and in CI: lint, format, types, then the tests.
#   scripts/check.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
