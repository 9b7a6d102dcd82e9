"""A person's machine for the pi adapter: a fresh HOME where the installer script runs and
``reef-pi`` is on PATH, in front of a real reef daemon and the scripted upstream.

The daemon fixtures are the daemon tests' (``make_reef``: the basic recipe) and the reefine
tests' (``reefine``: asks become releases, with the real pi as the health check).

Which pi: ``pi_bin``, by default any pi reef accepts (``$REEF_PI``, which ``tests/conftest.py``
sets to the project's 1.6.0 unless the developer has; then the project's 0.73.1, PATH);
a test marked :data:`both_pis` runs once with each tested pi (the oldest supported, 0.73.1, and
the newest, 1.6.0 with its node; ``scripts/setup.sh --dev`` installs both, and a missing one
fails the test).  The person's ``REEF_PI`` and the reefine daemon's health-check pi are that pi.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from reef_core.harness import HarnessBinary as PiBinary
from tests.daemon.conftest import RunningReef, make_reef
from tests.reefine.conftest import reefine as reefine_with_default_pi
from tests.reefine.conftest import upstream
from tests.reefine.pi import TESTED_PIS, require_pi

__all__ = [
    "Machine",
    "both_pis",
    "machine",
    "make_reef",
    "pi_bin",
    "reefine",
    "reefine_with_default_pi",
    "upstream",
]

SCENARIO = "dev"

#: run a test once with each tested pi (``pi_bin`` then is that pi)
both_pis = pytest.mark.parametrize("pi_bin", list(TESTED_PIS), indirect=True, ids=lambda v: f"pi-{v}")


class Machine:
    """A HOME of its own, with ``~/.local/bin`` first on PATH, and the harness binary under test
    named by the adapter's variable (``REEF_PI`` here; :class:`ClaudeMachine` is Claude Code's)."""

    adapter = "pi"
    command = "reef-pi"
    binary_env = "REEF_PI"
    config_dir = "agent"

    def __init__(self, root: Path, binary: Path) -> None:
        self.home = root / "home"
        self.work = self.home / "work"  # the harness's cwd: no AGENTS.md above it but reef's
        self.work.mkdir(parents=True)
        self.env = {
            "PATH": f"{self.home}/.local/bin:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.home),
            self.binary_env: str(binary),
            "LANG": "C.UTF-8",
        }

    @property
    def base(self) -> Path:
        return self.home / ".reef" / "harnesses" / self.adapter / SCENARIO

    @property
    def config(self) -> Path:
        return self.base / self.config_dir

    agent = config  # pi's name for it

    @property
    def launcher(self) -> Path:
        return self.home / ".local" / "bin" / self.command

    def sidecar(self) -> dict[str, Any]:
        return json.loads((self.base / "installed.json").read_text())

    def last_tag(self) -> str:
        """The run tag of the launcher's last run."""
        return str(json.loads((self.base / "last-run.json").read_text())["tag"])

    def script(self, reef: RunningReef, release: str | None = None, **headers: str) -> str:
        params = {"adapter": self.adapter, "scenario": SCENARIO, **({"release": release} if release else {})}
        response = httpx.get(f"{reef.url}/reef/harness/install", params=params, headers=headers)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/x-shellscript")
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

    def launch(self, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
        """The launcher (``reef-pi args``) from PATH, stdin closed (so the harness runs in print mode)."""
        return subprocess.run(
            [self.command, *args],
            env={**self.env, **env},
            cwd=self.work,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    reef_pi = launch

    def files(self) -> dict[str, tuple[int, int]]:
        """Every file under HOME, with its inode and modification time: what a write changes."""
        found = {}
        for path in sorted(self.home.rglob("*")):
            if path.is_file():
                stat = path.stat()
                found[str(path.relative_to(self.home))] = (stat.st_ino, stat.st_mtime_ns)
        return found


@pytest.fixture
def pi_bin(request: pytest.FixtureRequest) -> PiBinary:
    """The pi under test: any accepted one, or the tested pi of the version the test is
    parametrized with (see :data:`both_pis`)."""
    return require_pi(getattr(request, "param", None))


@pytest.fixture
def machine(tmp_path: Path, pi_bin: PiBinary) -> Machine:
    return Machine(tmp_path, pi_bin.path)


@pytest.fixture
def reefine(reefine_with_default_pi, pi_bin: PiBinary, monkeypatch: pytest.MonkeyPatch):
    """The reefine daemons' factory, their health check running ``pi_bin`` (``REEF_PI`` is read
    when a daemon starts)."""
    monkeypatch.setenv("REEF_PI", str(pi_bin.path))
    return reefine_with_default_pi


def run_records(reef: RunningReef, run_tag: str) -> list[dict[str, Any]]:
    response = httpx.get(
        f"{reef.url}/reef/scenarios/{SCENARIO}/records", params={"tag": f"run:{run_tag}", "limit": 1000}
    )
    assert response.status_code == 200, response.text
    return response.json()["records"]


def text_of(messages: Sequence[dict[str, Any]]) -> str:
    return json.dumps(list(messages), ensure_ascii=False)


os.environ.pop("REEF_SCENARIO", None)  # the launcher reads it; tests name the scenario themselves
