"""Harness binaries: where one is looked for, which version it is, and the PATH it runs with.

Owns, once for the launchers (``reef-pi``, ``reef-claude``, their ``doctor``) and the health
checks (:mod:`adapters.health`):

- the lookup order (:func:`candidates`): ``$REEF_<X>`` alone when set (a wrong binary there is a
  misconfiguration, not a reason to pick another), else the places the caller names, in order
  (the install's record, the project's ``.cache/tools``), then PATH;
- the launcher's pick (:func:`find_binary`): the first candidate that is executable, with no
  version probe (a launcher runs it on every start);
- ``--version`` probing (:func:`probe_version`; :func:`probed_version` probes each binary once,
  in a fresh empty home) and comparing versions (:func:`version_at_least`);
- the PATH a harness runs with: its own folder first (:func:`path_with`), or a minimal one
  (:func:`minimal_path`).  An npm install puts the node a newer harness needs next to it (pi 1.x
  wants node >= 22.19), so that folder comes first.

Imports the standard library, :mod:`reef_core.errors` and :mod:`reef_core.procs` only: the launchers
import it on every run.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reef_core.errors import ReefError
from reef_core.procs import run_brief, strip_ansi

if TYPE_CHECKING:
    from adapters.launcher import Context

__all__ = [
    "candidates",
    "find_binary",
    "minimal_path",
    "path_with",
    "probe_version",
    "probed_version",
    "version_at_least",
]

_SYSTEM_PATH = ("/usr/local/bin", "/usr/bin", "/bin")
_VERSION_PROBE_TIMEOUT = 20.0
_VERSION = re.compile(r"(?<![\d.])v?(\d+\.\d+\.\d+)(?![\d.])")


def candidates(
    env: Mapping[str, str], name: str, variable: str, known: Sequence[tuple[str, Path]] = ()
) -> list[tuple[str, Path | None]]:
    """Where to look for the binary ``name``, in order, each as ``(origin, path)``: only
    ``$variable`` (origin ``variable``) when ``env`` sets it, else each of ``known``, then what is
    on ``env``'s PATH (origin ``"PATH"``; its path is None when nothing is)."""
    explicit = env.get(variable)
    if explicit:
        return [(variable, Path(explicit).expanduser())]
    on_path = shutil.which(name, path=env.get("PATH"))
    return [*known, ("PATH", Path(on_path) if on_path else None)]


def find_binary(ctx: Context, installed: Mapping[str, Any]) -> str:
    """The harness binary a launcher runs: ``$REEF_<X>``, else the one the install found (when it
    is still there), else PATH."""
    harness = ctx.harness
    recorded = installed.get(harness.binary)
    known = [("install", Path(recorded))] if isinstance(recorded, str) and recorded else []
    for origin, path in candidates(ctx.env, harness.binary, harness.binary_env, known):
        if origin == harness.binary_env:
            return str(path)  # the person's choice: starting it says what is wrong with it
        if path is not None and os.access(path, os.X_OK):
            return str(path)
    raise ReefError(
        f"no {harness.binary} to run (the install found {recorded!r}, which is gone): "
        f"run {harness.command} update"
    )


def path_with(binary: str, path: str | None) -> str:
    """``PATH`` with the binary's own folder first: an npm install puts the node it needs there."""
    folder = str(Path(binary).parent)
    rest = [p for p in (path or os.defpath).split(os.pathsep) if p and p != folder]
    return os.pathsep.join([folder, *rest])


def minimal_path(env: Mapping[str, str], binary: Path | None = None) -> str:
    """The system directories plus the one holding ``node`` (a harness's ``#!/usr/bin/env node``),
    after ``binary``'s own folder (not the resolved one) when given: the node an npm install put
    next to a harness that needs a newer one than the system's comes first."""
    dirs = [str(binary.absolute().parent)] if binary is not None else []
    node = shutil.which("node", path=env.get("PATH", os.defpath))
    if node and str(Path(node).parent) not in dirs:
        dirs.append(str(Path(node).parent))
    dirs += [d for d in _SYSTEM_PATH if d not in dirs]
    return os.pathsep.join(dirs)


def probe_version(argv: list[str], env: Mapping[str, str], timeout: float = 30.0) -> str | None:
    """The last ``X.Y.Z`` that ``argv`` (a ``--version`` call) prints on stdout or stderr, when it
    exits 0; None when it does not start or says no version."""
    try:
        probe = run_brief(argv, env=env, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = _VERSION.findall(strip_ansi(probe.stdout + "\n" + probe.stderr))
    return found[-1] if probe.returncode == 0 and found else None


@functools.lru_cache(maxsize=32)
def probed_version(
    resolved: str,
    mtime_ns: int,
    search_path: str,
    homes: tuple[str, ...],
    extra: tuple[tuple[str, str], ...],
) -> str | None:
    """What ``<resolved> --version`` says, probed once per binary (a new install changes the
    mtime) with ``search_path`` as PATH, each of ``homes`` pointing at a fresh empty folder, and
    ``extra`` in the environment (the harness's offline switches)."""
    del mtime_ns  # part of the cache key only
    with tempfile.TemporaryDirectory(prefix="reef-version-") as home:
        env = {"PATH": search_path, **dict.fromkeys(homes, home), **dict(extra)}
        return probe_version([resolved, "--version"], env, timeout=_VERSION_PROBE_TIMEOUT)


def version_at_least(found: str | None, wanted: str) -> bool:
    """``found`` (``X.Y.Z``) is ``wanted`` or newer."""
    if not found:
        return False
    try:
        return _numbers(found) >= _numbers(wanted)
    except ValueError:
        return False


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("-")[0].split(".")[:3])
