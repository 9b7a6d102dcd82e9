"""The pi installer: one release, rendered for pi, as a self-contained ``curl … | sh`` script.

``GET /reef/harness/install?adapter=pi`` answers :meth:`PiInstaller.script`.  The script writes,
under ``${REEF_HOME:-$HOME/.reef}/harnesses/pi/<scenario>/`` (:class:`~adapters.pi.launcher.Layout`):

| path | what |
|---|---|
| ``agent/`` | pi's agent dir (``PI_CODING_AGENT_DIR``): the rendered tree, reef's extension, |
|            | a ``models.json`` whose ``reef`` provider points at the daemon |
| ``installed.json`` | the sidecar: release, commit, url, scenario, installed_at, each file's |
|                    | sha256, the pi it found, a digest of it all |

and the ``reef-pi`` launcher in ``${REEF_BIN_DIR:-$HOME/.local/bin}``, a small Python file with
the daemon's URL, the scenario and the daemon's interpreter baked in, which runs
:func:`adapters.pi.launcher.main`.

The provider's headers are environment-variable names that pi resolves on every request (and
sends literally when unset, which is why ``reef-pi`` always exports them): ``x-reef-scenario``
from ``REEF_SCENARIO`` and ``x-reef-tag-run`` from ``REEF_RUN_TAG``, a fresh id per run, so
the records of one run can be found again for ``reef-pi report``.

Rules the script keeps:

- Every file travels base64-encoded with its sha256; a file whose current content already has
  that sha256 is left alone, a new one goes through a temporary file that is checked before it
  is moved into place, and at the end every file is checked again.  A rerun with nothing new
  writes nothing (not even the sidecar, whose ``installed_at`` would change).
- Files a previous install wrote (listed in its sidecar) that this release no longer has are
  removed; pi's own files in the agent dir (``auth.json``, ``sessions/``) are never touched.
- pi itself: ``$REEF_PI`` when set (then the only candidate), else ``$REEF_HOME/npm/bin/pi``,
  else ``pi`` on PATH, each accepted only if ``pi --version`` says the pinned version; with none,
  npm installs the pinned pi under ``$REEF_HOME/npm``.
- The body is one function called on the last line, so a download cut short runs nothing.
- The daemon's token is never in the script: ``reef-pi`` reads ``REEF_TOKEN`` when it runs.
- Fetched over plain ``http://`` from an address beyond loopback, the script says first, on
  stderr and before it writes anything, that the files and the token travel unencrypted.  It
  warns and goes on: reef itself serves only http, so this is how every install from another
  machine without a TLS proxy looks, and a script that came over that channel could have had
  any check in it removed on the way.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shlex
from dataclasses import replace
from pathlib import Path

from adapters.pi.render import PiRenderer
from reef_core.harness.render import InstallPlan
from reef_core.hosts import is_loopback, url_host

__all__ = [
    "PI_PACKAGE",
    "PI_VERSION",
    "RUN_TAG_ENV",
    "RUN_TAG_HEADER",
    "PiInstaller",
    "launcher_source",
]

PI_PACKAGE = "@mariozechner/pi-coding-agent"
PI_VERSION = "0.73.1"
RUN_TAG_HEADER = "x-reef-tag-run"
RUN_TAG_ENV = "REEF_RUN_TAG"

#: the directory holding ``adapters`` and ``reef_core``: the launcher's fallback import path
_CODE_ROOT = Path(__file__).resolve().parents[2]
_WRAP = 76  # base64 line length
_MARKER = re.compile(r"@@[A-Z_]+@@")


def launcher_source(*, python: str, url: str, scenario: str, code_root: str = str(_CODE_ROOT)) -> str:
    """The ``reef-pi`` file: a shebang on the daemon's interpreter and the baked-in settings."""
    return f'''#!{python}
"""reef-pi: pi routed through reef.

Written by reef's installer for scenario {scenario} from {url}; run the installer again (or
`reef-pi update`) to change it.  REEF_URL and REEF_SCENARIO in the environment override the
values below; REEF_TOKEN is read when the daemon wants one.
"""
import os
import sys

URL = {url!r}
SCENARIO = {scenario!r}
CODE_ROOT = {code_root!r}  # where reef's Python code lives, for an interpreter that cannot find it

try:
    from adapters.pi.launcher import main
except ImportError:
    sys.path.insert(0, CODE_ROOT)
    from adapters.pi.launcher import main

sys.exit(main(sys.argv[1:], url=URL, scenario=SCENARIO, launcher=os.path.abspath(__file__)))
'''


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _b64(data: bytes) -> str:
    encoded = base64.b64encode(data).decode("ascii")
    return "\n".join(encoded[i : i + _WRAP] for i in range(0, len(encoded), _WRAP)) or "="


def _put(dest: str, mode: str, data: bytes) -> str:
    # base64 never contains the delimiter, whatever the file holds
    return f"put {dest} {mode} {_sha256(data)} <<'REEF_B64'\n{_b64(data)}\nREEF_B64\n"


def _json_string(value: str | None) -> str:
    return json.dumps(value, ensure_ascii=False)


def plain_http_beyond_loopback(url: str) -> bool:
    """True when ``url`` is ``http://`` to an address that is not this machine's loopback."""
    return url.lower().startswith("http://") and not is_loopback(url_host(url))


class PiInstaller:
    """Writes the ``curl … | sh`` script that installs one release for pi (see the module docstring)."""

    adapter = "pi"

    def script(self, plan: InstallPlan) -> str:
        target = replace(plan.target, headers={**plan.target.headers, RUN_TAG_HEADER: RUN_TAG_ENV})
        files = PiRenderer().render(plan.tree, target)
        launcher = launcher_source(python=plan.python, url=target.reef_url, scenario=target.scenario).encode()
        shas = {path: _sha256(data) for path, data in files.items()}
        digest = _sha256(
            json.dumps(
                {
                    "files": shas,
                    "launcher": _sha256(launcher),
                    "release": target.release,
                    "commit": plan.commit,
                    "url": target.reef_url,
                    "scenario": target.scenario,
                },
                sort_keys=True,
            ).encode()
        )
        file_lines = ",\n".join(
            f"    {_json_string(path)}: {_json_string(sha)}" for path, sha in shas.items()
        )
        # the sidecar without installed_at (the script adds it): one key per line, files one per
        # line, so that the script can read its own earlier sidecar with sed
        sidecar = "\n".join(
            [
                "{",
                '  "adapter": "pi",',
                f'  "commit": {_json_string(plan.commit)},',
                f'  "digest": "{digest}",',
                '  "files": {',
                file_lines,
                "  },",
                '  "launcher": @@LAUNCHER@@,',
                '  "pi": @@PI@@,',
                f'  "pi_version": "{PI_VERSION}",',
                f'  "release": {_json_string(target.release)},',
                f'  "scenario": {_json_string(target.scenario)},',
                f'  "url": {_json_string(target.reef_url)}',
                "}",
            ]
        )
        puts = "".join(_put(f'"$agent"/{shlex.quote(path)}', "644", data) for path, data in files.items())
        checks = "".join(f'  check "$agent"/{shlex.quote(p)} {sha}\n' for p, sha in shas.items())
        values = {
            "@@RELEASE_LABEL@@": target.release or "no release yet",
            "@@COMMIT_LABEL@@": (plan.commit or "")[:12] or "-",
            "@@URL@@": shlex.quote(target.reef_url),
            "@@SCENARIO@@": shlex.quote(target.scenario),
            "@@RELEASE@@": shlex.quote(
                f"release {target.release}" if target.release else "the empty harness (no release yet)"
            ),
            "@@PYTHON@@": shlex.quote(plan.python),
            "@@PI_VERSION@@": shlex.quote(PI_VERSION),
            "@@PI_PACKAGE@@": shlex.quote(PI_PACKAGE),
            "@@WANTED@@": shlex.quote("\n".join(files)),
            "@@TOKEN_NOTE@@": "1" if plan.token_required else "0",
            "@@PLAIN_HTTP@@": "1" if plain_http_beyond_loopback(target.reef_url) else "0",
            "@@PUTS@@": puts,
            "@@LAUNCHER_PUT@@": _put('"$launcher"', "755", launcher),
            "@@CHECKS@@": checks,
            "@@LAUNCHER_CHECK@@": f'  check "$launcher" {_sha256(launcher)}\n',
            "@@SIDECAR@@": sidecar,
            "@@FILE_COUNT@@": str(len(files)),
        }
        # one pass: a value that happens to hold a marker is never expanded again; markers the
        # script itself fills in (the sidecar's launcher and pi paths) are not in ``values``
        return _MARKER.sub(lambda m: values.get(m.group(0), m.group(0)), _TEMPLATE)


_TEMPLATE = r"""#!/bin/sh
# reef: install the pi harness of scenario @@SCENARIO@@, @@RELEASE_LABEL@@ (commit @@COMMIT_LABEL@@),
# served by @@URL@@.
#
# Writes ${REEF_HOME:-$HOME/.reef}/harnesses/pi/@@SCENARIO@@/agent/ (pi's agent dir: @@FILE_COUNT@@ files),
# .../installed.json (what is installed) and ${REEF_BIN_DIR:-$HOME/.local/bin}/reef-pi (the
# launcher); installs pi @@PI_VERSION@@ with npm under $REEF_HOME/npm if no such pi is found
# ($REEF_PI, $REEF_HOME/npm/bin/pi, PATH).  Each file is checked against its sha256; run it
# again at any time: it writes only what changed.
set -eu

reef_install() {
  url=@@URL@@
  scenario=@@SCENARIO@@
  release=@@RELEASE@@
  python=@@PYTHON@@
  pi_version=@@PI_VERSION@@
  pi_package=@@PI_PACKAGE@@
  wanted=@@WANTED@@

  reef_home=${REEF_HOME:-${HOME:?reef: HOME is not set}/.reef}
  base=$reef_home/harnesses/pi/$scenario
  agent=$base/agent
  sidecar=$base/installed.json
  bindir=${REEF_BIN_DIR:-$HOME/.local/bin}
  launcher=$bindir/reef-pi
  npm_prefix=$reef_home/npm
  written=0
  umask 022

  if [ @@PLAIN_HTTP@@ = 1 ]; then
    warn "this installer came over plain http from $url, an address beyond this machine:" \
      "the files it writes, and the token reef-pi sends to reef, travel unencrypted, and anyone" \
      "on the network path could read the token or change what is installed. Prefer https (a TLS" \
      "proxy in front of reef), or run the installer on reef's own machine."
  fi

  [ -x "$python" ] || die "the Python that runs reef ($python) is not there any more: fetch this script again"

  # tools: a sha256 and a base64 decoder, the system's or else Python's
  if command -v sha256sum >/dev/null 2>&1; then
    sha() { sha256sum "$1" | cut -d' ' -f1; }
  elif command -v shasum >/dev/null 2>&1; then
    sha() { shasum -a 256 "$1" | cut -d' ' -f1; }
  else
    sha() {
      "$python" - "$1" <<'REEF_PY'
import hashlib, sys
print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())
REEF_PY
    }
  fi
  if [ "$(printf 'cmVlZg==' | base64 -d 2>/dev/null)" = reef ]; then
    decode() { base64 -d; }
  else
    decode() {
      "$python" -c 'import base64, sys; sys.stdout.buffer.write(base64.b64decode(sys.stdin.read()))'
    }
  fi

  find_pi
  if [ -z "$pi" ]; then
    command -v npm >/dev/null 2>&1 || die "no pi $pi_version found (REEF_PI, $npm_prefix/bin/pi, PATH)" \
      "and npm is missing: install node >= 20.6 and npm, then run this again"
    say "installing pi $pi_version into $npm_prefix with npm"
    npm install -g --prefix "$npm_prefix" --ignore-scripts --no-audit --no-fund --loglevel=error \
      "$pi_package@$pi_version" >&2 || die "npm could not install $pi_package@$pi_version"
    pi_ok "$npm_prefix/bin/pi" || die "pi was installed in $npm_prefix but does not start" \
      "(it needs node >= 20.6): try $npm_prefix/bin/pi --version"
    pi=$npm_prefix/bin/pi
  fi

@@PUTS@@
  remove_stale
@@LAUNCHER_PUT@@
  write_sidecar

@@CHECKS@@
@@LAUNCHER_CHECK@@
  if [ "$written" = 0 ]; then
    say "pi harness of scenario $scenario is up to date ($release); nothing written"
  else
    say "pi harness of scenario $scenario: $release installed ($written changes)"
  fi
  say "  reef:      $url (scenario $scenario)"
  say "  agent dir: $agent"
  say "  launcher:  $launcher (pi: $pi)"
  case ":$PATH:" in
    *":$bindir:"*) ;;
    *) say "  note: $bindir is not on your PATH; add it, or run $launcher" ;;
  esac
  if [ @@TOKEN_NOTE@@ = 1 ]; then
    say "  note: this reef wants a token: export REEF_TOKEN before running reef-pi"
  fi
  say "  try: reef-pi -p \"hello\"   ask for changes: reef-pi evolve \"...\"   see releases: reef-pi versions"
}

say() { printf 'reef: %s\n' "$*"; }
die() { printf 'reef: install failed: %s\n' "$*" >&2; exit 1; }
warn() { printf 'reef: warning: %s\n' "$*" >&2; }

pi_ok() {
  [ -f "$1" ] && [ -x "$1" ] || return 1
  # pi prints its version on stderr when stdin is not a terminal
  found=$(PI_OFFLINE=1 "$1" --version </dev/null 2>&1 | tr -d '\r' |
    sed -n 's/^[[:space:]]*v\{0,1\}\([0-9][0-9.]*\)[[:space:]]*$/\1/p' | tail -n 1) || return 1
  [ "$found" = "$pi_version" ]
}

find_pi() {
  pi=
  if [ -n "${REEF_PI:-}" ]; then
    pi_ok "$REEF_PI" || die "REEF_PI=$REEF_PI is not pi $pi_version"
    pi=$REEF_PI
    return 0
  fi
  for candidate in "$npm_prefix/bin/pi" "$(command -v pi 2>/dev/null || true)"; do
    if [ -n "$candidate" ] && pi_ok "$candidate"; then
      pi=$candidate
      return 0
    fi
  done
}

# put DEST MODE SHA256, the content base64-encoded on stdin
put() {
  if [ -f "$1" ] && [ "$(sha "$1")" = "$3" ]; then
    cat >/dev/null
    if [ "$2" = 755 ] && [ ! -x "$1" ]; then
      chmod 755 "$1"
      written=$((written + 1))
    fi
    return 0
  fi
  mkdir -p "$(dirname "$1")"
  tmp="$1.reef-new.$$"
  decode >"$tmp"
  if [ "$(sha "$tmp")" != "$3" ]; then
    rm -f "$tmp"
    die "$1 did not come out as sent (sha256 mismatch); nothing more was written"
  fi
  chmod "$2" "$tmp"
  mv -f "$tmp" "$1"
  written=$((written + 1))
  say "  wrote $1"
}

check() {
  [ "$(sha "$1")" = "$2" ] || die "$1 does not hold what was written (sha256 mismatch)"
}

# files an earlier install listed in its sidecar that this release does not have
remove_stale() {
  [ -f "$sidecar" ] || return 0
  sed -n 's/^    "\([^"]*\)": "[0-9a-f]\{64\}",\{0,1\}$/\1/p' "$sidecar" | while IFS= read -r old; do
    case "$old" in
      "" | /* | ../* | */../* | */..) continue ;;
    esac
    if ! printf '%s\n' "$wanted" | grep -qxF "$old" && [ -f "$agent/$old" ]; then
      rm -f "$agent/$old"
      rmdir "$(dirname "$agent/$old")" 2>/dev/null || true
      say "  removed $agent/$old"
      # a subshell (the pipe) cannot count; the sidecar changes anyway, which marks the install
    fi
  done
}

json_str() {
  printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"
}

write_sidecar() {
  body=$(cat <<'REEF_SIDECAR'
@@SIDECAR@@
REEF_SIDECAR
)
  launcher_json=$(json_str "$launcher" | sed 's/[|&\\]/\\&/g')
  pi_json=$(json_str "$pi" | sed 's/[|&\\]/\\&/g')
  body=$(printf '%s\n' "$body" | sed "s|@@LAUNCHER@@|$launcher_json|; s|@@PI@@|$pi_json|")
  # the same install (a file put back counts as repair, not as a new install): keep installed_at
  if [ -f "$sidecar" ]; then
    old=$(grep -v '^  "installed_at": ' "$sidecar" || true)
    [ "$old" = "$body" ] && return 0
  fi
  mkdir -p "$base"
  tmp="$sidecar.reef-new.$$"
  {
    echo "{"
    printf '  "installed_at": "%s",\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    printf '%s\n' "$body" | sed '1d'
  } >"$tmp"
  mv -f "$tmp" "$sidecar"
  written=$((written + 1))
  say "  wrote $sidecar"
}

reef_install "$@"
"""
