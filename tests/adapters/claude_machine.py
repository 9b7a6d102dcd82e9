"""A person's machine for the Claude Code adapter: a fresh HOME where the installer script runs and
``reef-claude`` is on PATH, with the real ``claude`` (2.1.332) as ``REEF_CLAUDE``.

Missing claude is a failure, not a skip: CI installs it (``scripts/setup.sh --dev``).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.daemon.conftest import RunningReef

__all__ = ["CLAUDE_VERSION", "SCENARIO", "ClaudeMachine", "require_claude"]

SCENARIO = "dev"
CLAUDE_VERSION = "2.1.332"
_PROJECT_CLAUDE = Path(__file__).resolve().parents[2] / ".cache/tools/claude-code/node_modules/.bin/claude"


def require_claude() -> Path:
    """The pinned claude (``$REEF_CLAUDE`` or the project's), or fail the calling test."""
    path = Path(os.environ.get("REEF_CLAUDE") or _PROJECT_CLAUDE)
    try:
        said = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL
        ).stdout
    except OSError:
        said = ""
    if not said.startswith(CLAUDE_VERSION):
        pytest.fail(
            f"@anthropic-ai/claude-code@{CLAUDE_VERSION} not found at {path}: run scripts/setup.sh --dev, "
            "or point REEF_CLAUDE at it",
            pytrace=False,
        )
    return path


class ClaudeMachine:
    """A HOME of its own, with ``~/.local/bin`` first on PATH, and the pinned claude as ``REEF_CLAUDE``."""

    def __init__(self, root: Path, claude: Path) -> None:
        self.home = root / "home"
        self.work = self.home / "work"  # claude's cwd
        self.work.mkdir(parents=True)
        self.env = {
            "PATH": f"{self.home}/.local/bin:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.home),
            "REEF_CLAUDE": str(claude),
            "LANG": "C.UTF-8",
            "CLAUDE_CODE_MAX_RETRIES": "0",
            "IS_SANDBOX": "1",  # tests run as root: let the permission flags through
        }

    @property
    def base(self) -> Path:
        return self.home / ".reef" / "harnesses" / "claude_code" / SCENARIO

    @property
    def config(self) -> Path:
        return self.base / "config"

    @property
    def launcher(self) -> Path:
        return self.home / ".local" / "bin" / "reef-claude"

    def sidecar(self) -> dict[str, Any]:
        return json.loads((self.base / "installed.json").read_text())

    def last_tag(self) -> str:
        return str(json.loads((self.base / "last-run.json").read_text())["tag"])

    def script(self, reef: RunningReef, release: str | None = None, **headers: str) -> str:
        params = {"adapter": "claude_code", "scenario": SCENARIO, **({"release": release} if release else {})}
        response = httpx.get(f"{reef.url}/reef/harness/install", params=params, headers=headers)
        assert response.status_code == 200, response.text
        return response.text

    def install(
        self, reef: RunningReef, release: str | None = None, token: str | None = None, **env: str
    ) -> subprocess.CompletedProcess:
        """``curl … | sh``: the script on sh's stdin."""
        auth = {"authorization": f"Bearer {token}"} if token else {}
        run = subprocess.run(
            ["sh", "-s"],
            input=self.script(reef, release, **auth),
            env={**self.env, **env},
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, f"the installer failed:\n{run.stdout}\n{run.stderr}"
        return run

    def reef_claude(self, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
        """``reef-claude args`` from PATH, stdin closed."""
        return subprocess.run(
            ["reef-claude", *args],
            env={**self.env, **env},
            cwd=self.work,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def files(self) -> dict[str, tuple[int, int]]:
        """Every file under HOME, with its inode and modification time: what a write changes."""
        found = {}
        for path in sorted(self.home.rglob("*")):
            if path.is_file():
                stat = path.stat()
                found[str(path.relative_to(self.home))] = (stat.st_ino, stat.st_mtime_ns)
        return found
