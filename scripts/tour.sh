#!/usr/bin/env bash
# A first look at reef: the daemon's settings, then a scenario round trip on a fresh state
# directory, audited with plain git.  (Until the embedded model lands, this is the main job.)
set -euo pipefail
cd "$(dirname "$0")/.."
reef=.venv/bin/reef
state=$(mktemp -d "${TMPDIR:-/tmp}/reef-tour.XXXXXX")
"$reef" --version
"$reef" serve --help
"$reef" serve --print-config --storage.state-dir "$state"
"$reef" scenario create demo --state-dir "$state"
.venv/bin/python - "$state" <<'PY'
import sys
from pathlib import Path
from reef_core.store import Store, build_tree

with Store(Path(sys.argv[1])).open("demo") as scenario:
    rec = scenario.append_sync("record", {"route": "chat.completions", "status": 200},
                               summary="chat.completions model=demo 200 3ms")
    scenario.append_sync("report", {"score": 1.0, "references": [rec]}, summary=f"score=1.0 refs={rec}")
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
