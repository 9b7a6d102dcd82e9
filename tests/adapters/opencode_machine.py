"""A person's machine for the opencode adapter: the pi machine's (:class:`Machine`), with
``reef-opencode`` on PATH and the real ``opencode`` (1.18.33) as ``REEF_OPENCODE``.

opencode keeps its own folders under the machine's HOME (``~/.config/opencode``,
``~/.local/share/opencode``), where the npm stubs are put in advance, as a person's opencode
that has run once has them: the tests run offline.  Missing opencode is a failure, not a skip:
CI installs it (``scripts/setup.sh --dev``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.opencode.health import OpencodeHealth
from adapters.opencode.render import NPM_STUBS
from tests.adapters.conftest import SCENARIO, Machine

__all__ = ["SCENARIO", "OpencodeMachine", "require_opencode"]


def require_opencode() -> Path:
    """The pinned opencode (``$REEF_OPENCODE`` or the project's), or fail the calling test."""
    health = OpencodeHealth()
    found = health.find()
    if found is None:
        pytest.fail(health.missing(), pytrace=False)
    return found.path


class OpencodeMachine(Machine):
    adapter = "opencode"
    command = "reef-opencode"
    binary_env = "REEF_OPENCODE"
    config_dir = "config"

    def __init__(self, root: Path, binary: Path) -> None:
        super().__init__(root, binary)
        self.env["OPENCODE_DISABLE_LSP_DOWNLOAD"] = "1"
        own = self.home / ".config" / "opencode"
        for name, content in NPM_STUBS.items():
            (own / name).parent.mkdir(parents=True, exist_ok=True)
            (own / name).write_bytes(content)

    reef_opencode = Machine.launch
