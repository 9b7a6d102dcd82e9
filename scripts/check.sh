#!/usr/bin/env bash
# The project's checks, the same here and in CI: lint, format, types, then the tests, on two
# pytest-xdist workers a core (at most 8; REEF_TEST_WORKERS=N sets how many, 0 runs them in this
# process), the 10 slowest printed at the end.  Two a core, because most tests spend most of
# their time waiting on a child process (a daemon, git, pi, claude): on 2 cores, 4 workers ran
# the suite in 7 min 20 s where 2 took 9 min 48 s.  --dist loadgroup keeps the tests of a module
# with a module-scoped fixture on one worker (tests/conftest.py marks them), 6 min 49 s.
#   scripts/check.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# the embedded model the tests share, pretrained (600 steps, about a minute) before the workers
# compete for the CPU; its budget is in steps, so the model is the same however busy the machine
.venv/bin/python -c "from reef_core.models.tiny import ensure_pretrained; ensure_pretrained('.cache/models/tiny', seconds=60)"
# bytecode written and reused: with PYTHONDONTWRITEBYTECODE set (as on these VMs) every worker
# compiled and assertion-rewrote every test module again (collection took 18.8 s of CPU a worker,
# 7.9 s with the cache), and every daemon and CLI the tests start compiled reef's modules again
unset PYTHONDONTWRITEBYTECODE
workers=$(($(nproc) * 2))
[ "$workers" -gt 8 ] && workers=8
exec .venv/bin/python -m pytest -n "${REEF_TEST_WORKERS:-$workers}" --dist loadgroup --durations=10 "$@"
