"""The real Claude Code for end-to-end tests: found, or the test fails saying how to install it.

Missing claude is a failure, not a skip: CI installs it (``scripts/setup.sh --dev``), so a skip
would only hide a broken setup.
"""

from __future__ import annotations

import pytest

from adapters.claude_code.health import find_claude, missing_claude
from reef_core.harness import HarnessBinary as ClaudeBinary

__all__ = ["require_claude"]


def require_claude() -> ClaudeBinary:
    """Claude Code 2.1.332 or newer (its ``.path`` is the binary), or fail the calling test."""
    claude = find_claude()
    if claude is None:
        pytest.fail(missing_claude(), pytrace=False)
    return claude
