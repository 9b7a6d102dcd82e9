#!/usr/bin/env bash
# A shorter look at reef than `reef demo`: the daemon's settings, the daemon over HTTP with
# the embedded model (cached with the demo's), then a scenario round trip audited with git.
set -euo pipefail
cd "$(dirname "$0")/.."
reef=.venv/bin/reef
py=.venv/bin/python
state=$(mktemp -d "${TMPDIR:-/tmp}/reef-tour.XXXXXX")
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

"$reef" --version
"$reef" serve --print-config --reef.port "$port" --storage.state-dir "$state"

echo "== the daemon, on 127.0.0.1:$port"
"$reef" serve --reef.port "$port" --storage.state-dir "$state" --inference.model-path builtin:tiny \
    --inference.model-cache .reef/demo/models &
daemon=$!
trap 'kill "$daemon" 2>/dev/null || true' EXIT
"$py" - "$port" <<'PY'
import json, sys, time, urllib.request, urllib.error
base = f"http://127.0.0.1:{sys.argv[1]}"
for _ in range(3000):  # the first run pretrains the embedded model (about a minute)
    try:
        urllib.request.urlopen(f"{base}/healthz", timeout=1)
        break
    except OSError:
        time.sleep(0.1)
def call(method, path, body=None, headers=None):
    request = urllib.request.Request(f"{base}{path}", method=method, data=json.dumps(body).encode() if body else None,
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
print("POST /reef/scenarios ->", *call("POST", "/reef/scenarios", {"name": "demo"}))
print("GET /reef/status ->", *call("GET", "/reef/status"))
status, body = call("POST", "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                    {"x-reef-scenario": "demo"})
print("POST /v1/chat/completions ->", status, repr(body["choices"][0]["message"]["content"]))
PY
kill -TERM "$daemon"
wait "$daemon" || true
trap - EXIT

echo "== a scenario round trip through the store"
"$py" - "$state" <<'PY'
import sys
from pathlib import Path
from reef_core.store import Store, build_tree

with Store(Path(sys.argv[1])).open("demo") as scenario:
    rec = scenario.append_sync("record", {"route": "chat.completions", "status": 200},
                               summary="chat.completions model=demo 200 3ms")
    scenario.append_sync("report", {"score": 1.0, "references": [rec]}, summary=f"score=1 refs={rec}")
    scenario.append_sync("ask", {"text": "reproduce bugs with a failing test first"},
                         summary='"reproduce bugs with a failing test first"')
    tree = build_tree(scenario.handle.repo, {"rules/tests-first.md": b"Reproduce a bug with a failing test first.\n"})
    scenario.releases.publish(tree, expected=None, operation="creation")
PY
"$reef" scenario show demo --state-dir "$state"
"$reef" log demo --state-dir "$state"
repo="$state/scenarios/demo.git"
git -C "$repo" log --oneline data
git -C "$repo" log --oneline release
git -C "$repo" fsck --strict --no-dangling && echo "git fsck: clean"
echo "the repository: $repo"
