"""A person's machine for the Claude Code adapter: the pi machine's (:class:`Machine`), with
``reef-claude`` on PATH and the real ``claude`` (2.1.332) as ``REEF_CLAUDE``.

Missing claude is a failure, not a skip: CI installs it (``scripts/setup.sh --dev``).
"""

from __future__ import annotations

from pathlib import Path

from tests.adapters.conftest import SCENARIO, Machine
from tests.reefine.claude import require_claude as _require_claude

__all__ = ["SCENARIO", "ClaudeMachine", "require_claude"]


def require_claude() -> Path:
    """The pinned claude (``$REEF_CLAUDE`` or the project's), or fail the calling test."""
    return _require_claude().path


class ClaudeMachine(Machine):
    adapter = "claude_code"
    command = "reef-claude"
    binary_env = "REEF_CLAUDE"
    config_dir = "config"

    def __init__(self, root: Path, claude: Path) -> None:
        super().__init__(root, claude)
        self.env["CLAUDE_CODE_MAX_RETRIES"] = "0"
        self.env["IS_SANDBOX"] = "1"  # tests run as root: let the permission flags through

    reef_claude = Machine.launch
