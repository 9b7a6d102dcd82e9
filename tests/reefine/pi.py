"""The real pi for end-to-end tests: found, or the test fails saying how to install it.

Missing pi is a failure, not a skip: CI installs it (``scripts/setup.sh --dev``), so a skip would
only hide a broken setup.

``require_pi()`` is any pi reef accepts (0.73.1 or newer: ``$REEF_PI``, the project's
``.cache/tools`` install, PATH); in the suite ``$REEF_PI`` is the newest tested pi unless the
developer set it (``tests/conftest.py``).  ``require_pi(version)`` is the project's install of exactly
that pi, one of :data:`TESTED_PIS`: the oldest supported and the newest tested, which
``scripts/setup.sh --dev`` installs side by side (pi 1.x with the node it needs next to it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.pi.health import PI_MIN_VERSION, find_pi, probe_pi
from reef_core.harness import HarnessBinary as PiBinary

__all__ = ["PI_NEXT", "TESTED_PIS", "require_pi"]

_TOOLS = Path(__file__).resolve().parents[2] / ".cache" / "tools"
PI_NEXT = "1.6.0"  # the newest pi the adapter is tested with (adapters/pi/install.py installs it)
#: each tested pi version: its npm package and the project's install of it
TESTED_PIS = {
    PI_MIN_VERSION: ("@mariozechner/pi-coding-agent", _TOOLS / "node_modules" / ".bin" / "pi"),
    PI_NEXT: ("@earendil-works/pi-coding-agent", _TOOLS / f"pi-{PI_NEXT}" / "node_modules" / ".bin" / "pi"),
}


def require_pi(version: str | None = None) -> PiBinary:
    """A pi reef accepts, or with ``version`` the project's pi of that version (its ``.path`` is
    the binary); else fail the calling test."""
    if version is not None:
        return _require_tested(version)
    pi = find_pi()
    if pi is None:
        pytest.fail(
            f"no pi {PI_MIN_VERSION} or newer found (looked at $REEF_PI, .cache/tools/node_modules/.bin/pi "
            f"and PATH): run scripts/setup.sh --dev, or point REEF_PI at a pi {PI_MIN_VERSION} or newer",
            pytrace=False,
        )
    return pi


def _require_tested(version: str) -> PiBinary:
    if version not in TESTED_PIS:
        raise ValueError(f"pi {version} is not one of the tested pis ({', '.join(TESTED_PIS)})")
    package, path = TESTED_PIS[version]
    pi = probe_pi(path)
    if pi is None or pi.version != version:
        said = f"it is pi {pi.version}" if pi else "it is missing or does not start"
        pytest.fail(
            f"{package}@{version} is needed at {path} ({said}): run scripts/setup.sh --dev",
            pytrace=False,
        )
    return pi
