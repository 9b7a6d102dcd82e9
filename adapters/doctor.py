"""``reef-pi doctor``, ``reef-claude doctor``: one line per prerequisite of a launcher, and exit 0
only when all are met.

The lines, in order: this Python; the daemon answers (and its version); the token is accepted
(or none is needed); what is installed, and whether the installed files still match the sha256
the installer recorded; a newer current release (a note, not a failure); the harness binary the
launcher would run (:func:`adapters.binaries.find_binary`) and whether ``--version`` says it is
the oldest reef accepts or newer; the launcher on PATH.  Each line says how to fix what fails.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path
from typing import Any

from adapters import launcher as core
from adapters.binaries import find_binary, path_with, probe_version, version_at_least
from adapters.launcher import Context
from reef_core.client import DaemonUnavailable, ReefClient
from reef_core.errors import ReefError

__all__ = ["doctor", "require_daemon"]


def require_daemon(client: ReefClient) -> dict[str, Any]:
    """``GET /healthz``; when no daemon answers, :class:`DaemonUnavailable` saying how to start one."""
    try:
        return client.health()
    except DaemonUnavailable as exc:
        raise DaemonUnavailable(f"{exc.message}: start it with `reef serve`") from exc


def doctor(ctx: Context, args: list[str]) -> int:
    core._parse(ctx, "doctor", args, lambda p: None)
    harness = ctx.harness
    lines: list[tuple[bool | None, str, str]] = []  # (met, what, detail); None: a note
    lines.append((True, "python", f"{sys.executable} ({sys.version.split()[0]})"))
    reachable = False
    listing = None
    try:
        with ctx.client(timeout=5.0) as client:
            health = require_daemon(client)
            reachable = True
            lines.append((True, "reef daemon", f"{ctx.url} answers (reef {health.get('version')})"))
            try:
                client.status()
                lines.append((True, "token", "accepted" if ctx.token else "none needed"))
            except ReefError as exc:
                hint = "export REEF_TOKEN" if not ctx.token else "check REEF_TOKEN"
                lines.append((False, "token", f"{exc.message} ({hint})"))
            try:
                listing = client.releases(ctx.scenario)
            except ReefError:
                pass
    except ReefError as exc:
        lines.append((False, "reef daemon", exc.message))
    sidecar = core.read_sidecar(ctx.layout)
    if sidecar is None:
        lines.append(
            (False, "installed", f"nothing in {ctx.layout.base}: curl -fsSL '{ctx.installer_url()}' | sh")
        )
    else:
        lines.append((True, "installed", f"{sidecar.get('release') or 'no release'} in {ctx.layout.config}"))
        files = sidecar.get("files") or {}
        bad = [p for p, sha in files.items() if _sha256_of(ctx.layout.config / p) != sha]
        if bad:
            lines.append(
                (
                    False,
                    "files",
                    f"{len(bad)} changed or missing ({', '.join(bad[:3])}): run {harness.command} update",
                )
            )
        else:
            lines.append((True, "files", f"{len(files)} match their sha256"))
        if reachable and listing is not None:
            tip = next((r for r in listing.get("releases", []) if r.get("current")), None)
            if tip and tip.get("release") != sidecar.get("release"):
                lines.append((None, "release", f"{tip['release']} is available: {harness.command} update"))
    try:
        binary = find_binary(ctx, sidecar or {})
    except ReefError as exc:
        lines.append((False, harness.binary, exc.message))
    else:
        version = probe_version([binary, "--version"], _probe_env(ctx, binary))
        if version_at_least(version, harness.min_version):
            lines.append((True, harness.binary, f"{binary} is {harness.label} {version}"))
        else:
            said = f"is {harness.label} {version}" if version else "does not start (node on PATH?)"
            lines.append(
                (
                    False,
                    harness.binary,
                    f"{binary} {said}; reef needs {harness.min_version} or newer: "
                    f"run {harness.command} update",
                )
            )
    on_path = shutil.which(harness.command, path=ctx.env.get("PATH"))
    if on_path:
        lines.append((True, "PATH", f"{harness.command} is {on_path}"))
    else:
        bindir = ctx.env.get("REEF_BIN_DIR") or str(
            Path(ctx.env.get("HOME") or Path.home()) / ".local" / "bin"
        )
        lines.append((False, "PATH", f"{harness.command} is not on PATH: add {bindir} to it"))
    width = max(len(what) for _, what, _ in lines)
    for met, what, detail in lines:
        mark = "note" if met is None else ("ok" if met else "FAIL")
        ctx.say(f"{mark:<4}  {what:<{width}}  {detail}")
    return 0 if all(met is not False for met, _, _ in lines) else 1


def _probe_env(ctx: Context, binary: str) -> dict[str, str]:
    return {
        "PATH": path_with(binary, ctx.env.get("PATH")),
        "HOME": ctx.env.get("HOME", ""),
        "PI_OFFLINE": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


def _sha256_of(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
