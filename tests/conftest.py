"""Shared fixtures: hermetic git, real bare repositories in temporary directories."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reef_core.store import Store, StoreOptions

# Tests never see the developer's or the machine's git configuration.
os.environ["GIT_CONFIG_GLOBAL"] = os.devnull
os.environ["GIT_CONFIG_NOSYSTEM"] = "1"
os.environ.pop("REEF_TOKEN", None)

LFS_CONFIG = [
    "-c",
    "filter.lfs.clean=git-lfs clean -- %f",
    "-c",
    "filter.lfs.smudge=git-lfs smudge -- %f",
    "-c",
    "filter.lfs.process=git-lfs filter-process",
    "-c",
    "filter.lfs.required=true",
]


def git(*args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the real git CLI; fails the test with git's own words when ``check`` and it fails."""
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        pytest.fail(f"git {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
    return result


def wait_for(condition: Callable[[], object], timeout: float = 20.0) -> bool:
    """Poll ``condition`` until it holds (True) or ``timeout`` seconds pass (its last answer)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return bool(condition())


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "state", StoreOptions(pack_every=0))


@pytest.fixture
def scenario(store: Store):
    opened = store.open("demo", create=True)
    yield opened
    opened.close()
