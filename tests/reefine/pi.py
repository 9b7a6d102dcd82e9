"""The real pi for end-to-end tests: found, or the test fails saying how to install it.

Missing pi is a failure, not a skip: CI installs it (``scripts/setup.sh --dev``), so a skip would
only hide a broken setup.
"""

from __future__ import annotations

import pytest

from recipes.reefine.health import PI_PACKAGE, PI_VERSION, PiBinary, find_pi

__all__ = ["require_pi"]


def require_pi() -> PiBinary:
    """The pinned pi (its ``.path`` is the binary), or fail the calling test."""
    pi = find_pi()
    if pi is None:
        pytest.fail(
            f"{PI_PACKAGE}@{PI_VERSION} not found (looked at $REEF_PI, .cache/tools/node_modules/.bin/pi "
            "and PATH): run scripts/setup.sh --dev, or point REEF_PI at a pi "
            f"{PI_VERSION} binary",
            pytrace=False,
        )
    return pi
