#!/usr/bin/env bash
# Keep what each real harness sends through reef as the fixtures of tests/fixtures/harness_requests/.
#
# Runs the Responses column of tests/adapters/test_matrix.py (each harness reef supports, installed
# by its installer, one prompt, the model calling the harness's file-reading tool then answering)
# with REEF_CAPTURE set: each cell writes the requests reef recorded, the agent's first turn
# (first.json) and the turn carrying the tool's result (tool_result.json), into
# tests/fixtures/harness_requests/<harness>-<version>/.  The harnesses reach only reef: the run is
# in a network namespace of its own with loopback alone up, and each launcher's traffic switches
# are on.  tests/wire/test_harness_fixtures.py replays the fixtures against each kind of upstream.
#   scripts/capture_harness_requests.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=tests/fixtures/harness_requests
exec unshare -rn sh -c "ip link set lo up && REEF_CAPTURE=$out .venv/bin/python -m pytest \
  tests/adapters/test_matrix.py -k 'reads_a_file and responses' -p no:cacheprovider -q"
