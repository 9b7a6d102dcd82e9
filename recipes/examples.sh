# What the recipes' examples (recipes/<name>/examples/<example>/run.sh) share; sourced, not run:
#   here="$(cd "$(dirname "$0")" && pwd)"; . "$here/../../../examples.sh"
# It sets root (the checkout), py and reef (its virtual environment's), and defines:
#   example SCENARIO PORT
# which sets scenario, port ($REEF_PORT, else PORT), url, state (a new temporary folder) and repo
# (the scenario's repository in it), and
#   serve_smollm2 PORT STATE [reef serve flags...]
# which starts reef serve with the example's reef.toml on builtin:smollm2 (the GGUF converted
# once into the checkout's model cache, about 30 s, then read back), logs to STATE/reef.log,
# stops it when the script exits, and returns once /healthz answers (or fails with the log).
root="$(cd "$here/../../../.." && pwd)"
py="$root/.venv/bin/python"
reef="$root/.venv/bin/reef"

example() {
  scenario=$1
  port="${REEF_PORT:-$2}"
  url="http://127.0.0.1:$port"
  state="$(mktemp -d "${TMPDIR:-/tmp}/reef-$scenario.XXXXXX")"
  repo="$state/scenarios/$scenario.git"
}

serve_smollm2() {
  local port=$1 state=$2
  shift 2
  "$reef" serve -c "$here/reef.toml" --reef.port "$port" --storage.state-dir "$state" \
    --inference.model-cache "$root/.cache/models" "$@" >"$state/reef.log" 2>&1 &
  daemon=$!
  trap 'kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null || true' EXIT
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && return 0
    kill -0 "$daemon" 2>/dev/null || { cat "$state/reef.log"; exit 1; }
    sleep 0.5
  done
  echo "reef did not start: $state/reef.log" >&2
  exit 1
}
