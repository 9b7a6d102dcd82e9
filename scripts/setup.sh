#!/usr/bin/env bash
# Sets up reef on a fresh machine: system packages (git, git-lfs), a virtual environment in
# .venv, and reef itself.  Safe to run again: it only installs what is missing.
#
#   scripts/setup.sh          what `reef` needs to run
#   scripts/setup.sh --dev    plus what the tests and checks need
set -euo pipefail
cd "$(dirname "$0")/.."

# torch (the "model" extra) is pinned to 2.13.0, which these machines install from a local
# CPU wheel (pip's find-links); elsewhere, point pip at a CPU build to avoid a CUDA download.
extras="model"
for arg in "$@"; do
  case "$arg" in
    --dev) extras="model,dev" ;;
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
echo "reef is set up: .venv/bin/reef"
