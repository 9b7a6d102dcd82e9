"""Which tree a new session runs: the installed release, or the scenario's canary.

Before a run starts, the launcher asks the daemon (``GET /reef/harness/canary``) which tree this
session gets.  While a canary runs, a sticky share of new sessions (a hash of the session tag)
gets the canary: the answer then carries the config folder the adapter's installer would write
for the canary's tree, which is laid out under ``<install>/canary/<cN>/`` and given to the
harness instead of the installed one.  The installed release is never touched, so the next
session (or the person's own ``update``) is unaffected; folders of canaries that ended are
removed when another is laid out.

The session's tree is sent with every request as the ``release`` tag (``REEF_RELEASE_TAG``),
so the records say which tree served them and the canary's test counts the session for it.

Nothing here stops a run: when the daemon cannot say (an older daemon, a recipe without
canaries, a timeout), the session runs the installed release, as it did before canaries.
Standard library only: this is on every run's path.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from dataclasses import dataclass
from http.client import HTTPConnection, HTTPSConnection
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlencode, urlsplit

if TYPE_CHECKING:
    from adapters.launcher import Context

__all__ = ["SessionTree", "session_tree"]

_ASK_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class SessionTree:
    config: Path  # the folder the harness is pointed at
    release: str | None  # the tree's name: the installed vN, or the canary's cN
    notice: str | None = None  # a line for the person when the session runs a canary


def session_tree(ctx: Context, session: str, installed: str | None) -> SessionTree:
    """The tree session ``session`` runs (see the module docstring)."""
    own = SessionTree(ctx.layout.config, installed)
    if ctx.env.get("REEF_CANARY", "").lower() in ("0", "off", "no", "false"):
        return own
    answer = _ask(ctx, session)
    if not answer or answer.get("arm") != "canary" or not isinstance(answer.get("files"), dict):
        return own
    name = str(answer.get("canary") or "")
    if not (name[:1] == "c" and name[1:].isdigit()):
        return own
    try:
        folder = _lay_out(ctx.layout.base / "canary", name, ctx.harness.config_dir, answer["files"])
    except (OSError, ValueError) as exc:
        print(
            f"{ctx.harness.command}: canary {name} could not be laid out ({exc}); running {installed}",
            file=ctx.err,
        )
        return own
    share = answer.get("share")
    notice = (
        f"reef: this session tries canary {name}, a candidate after {answer.get('base')}"
        + (f", given to {float(share):.0%} of new sessions" if isinstance(share, (int, float)) else "")
        + f"; what it changes: {ctx.harness.command} versions {name}"
    )
    return SessionTree(folder, name, notice)


def _ask(ctx: Context, session: str) -> dict | None:
    parts = urlsplit(ctx.url)
    query = urlencode({"adapter": ctx.harness.adapter, "scenario": ctx.scenario, "session": session})
    headers = {"Authorization": f"Bearer {ctx.token}"} if ctx.token else {}
    kind = HTTPSConnection if parts.scheme == "https" else HTTPConnection
    try:
        connection = kind(parts.hostname or "", parts.port, timeout=_ASK_TIMEOUT_S)
        try:
            connection.request(
                "GET", f"{parts.path.rstrip('/')}/reef/harness/canary?{query}", headers=headers
            )
            response = connection.getresponse()
            body = response.read()
        finally:
            connection.close()
    except (OSError, ValueError):
        return None
    if response.status != 200:
        return None
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def _lay_out(root: Path, name: str, config_dir: str, files: dict) -> Path:
    """Write the canary's config folder once (a later session of the same canary reuses it);
    folders of other canaries are removed."""
    folder = root / name / config_dir
    if root.is_dir():
        for other in root.iterdir():
            if other.name != name and not other.name.startswith("."):
                shutil.rmtree(other, ignore_errors=True)
    if folder.is_dir():
        return folder
    staging = root / f".{name}.{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    for path, data in files.items():
        parts = str(path).split("/")
        if not path or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"the daemon sent an unsafe path {path!r}")
        target = staging / config_dir / Path(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(base64.b64decode(str(data), validate=True))
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    try:
        staging.rename(root / name)
    except OSError:  # another session of the same canary laid it out first
        shutil.rmtree(staging, ignore_errors=True)
    return folder
