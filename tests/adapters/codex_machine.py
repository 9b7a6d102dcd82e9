"""A person's machine for the Codex adapter: the pi machine's (:class:`Machine`), with
``reef-codex`` on PATH and the real ``codex`` (0.171.0) as ``REEF_CODEX``.

Missing codex is a failure, not a skip: CI installs it (``scripts/setup.sh --dev``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.codex.health import CodexHealth
from tests.adapters.conftest import SCENARIO, Machine

__all__ = ["SCENARIO", "CodexMachine", "require_codex"]


def require_codex() -> Path:
    """The pinned codex (``$REEF_CODEX`` or the project's), or fail the calling test."""
    health = CodexHealth()
    found = health.find()
    if found is None:
        pytest.fail(health.missing(), pytrace=False)
    return found.path


class CodexMachine(Machine):
    adapter = "codex"
    command = "reef-codex"
    binary_env = "REEF_CODEX"
    config_dir = "home"

    reef_codex = Machine.launch
