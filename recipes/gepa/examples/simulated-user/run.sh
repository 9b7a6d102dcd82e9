#!/usr/bin/env bash
# GEPA on a simulated user, end to end: reef serve with the GEPA recipe (reef.toml), three rounds
# of twelve sessions through reef's OpenAI route with feedback, `reef learn` after each, then the
# releases and the learned rules read with plain git.  Runs as is after `scripts/setup.sh --dev`,
# in a temporary state directory, on free loopback ports; nothing outside this machine is used.
#
# The model is a scripted stand-in (model.py: bench/usage_sim.py's rule-following SimModel), so
# this shows the mechanism, not what a capable model gains.  To use your own OpenAI-compatible
# endpoint instead: REEF_UPSTREAM_URL=http://127.0.0.1:11434/v1 REEF_UPSTREAM_MODEL=qwen3-coder ./run.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
py="$root/.venv/bin/python"
reef="$root/.venv/bin/reef"
scenario=gepa-demo
work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
ready() {  # wait until $1 answers, or give up naming $2's log
  for _ in $(seq 300); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "run.sh: $1 did not answer; see $2:" >&2; cat "$2" >&2; exit 1
}

upstream="${REEF_UPSTREAM_URL:-}"
if [ -z "$upstream" ]; then
  mport="$(free_port)"
  "$py" "$here/model.py" --port "$mport" >"$work/model.log" 2>&1 &
  pids+=($!)
  upstream="http://127.0.0.1:$mport/v1"
  until "$py" -c "import socket; socket.create_connection(('127.0.0.1', $mport), 1)" 2>/dev/null; do sleep 0.1; done
fi
port="$(free_port)"
url="http://127.0.0.1:$port"
"$reef" serve -c "$here/reef.toml" --reef.port "$port" --storage.state-dir "$work/state" \
  --inference.upstream-url "$upstream" --inference.upstream-model "${REEF_UPSTREAM_MODEL:-sim}" \
  >"$work/reef.log" 2>&1 &
pids+=($!)
ready "$url/healthz" "$work/reef.log"

for round in 1 2 3; do
  echo
  "$py" "$here/user.py" round "$round" --url "$url" --scenario "$scenario"
  "$reef" learn "$scenario" --url "$url"
  "$py" "$here/user.py" step --state "$work/state" --scenario "$scenario"
done

echo
"$py" "$here/user.py" round 4 --url "$url" --scenario "$scenario"
echo
"$reef" releases "$scenario" --url "$url"
repo="$work/state/scenarios/$scenario.git"
echo
echo "git --git-dir \$STATE/scenarios/$scenario.git tag; show v2:rules/learned.md"
git --git-dir "$repo" tag
git --git-dir "$repo" show v2:rules/learned.md
