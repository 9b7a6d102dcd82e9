"""A bad recipe setting stops ``reef serve`` at start, naming it, instead of a daemon that
reports healthy and then refuses every request (issue 29 (6)).  The real CLI, in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.upstream import ScriptedUpstream


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (
            ["--recipe.name", "reefine", "--recipe.config.canary-shares", "0.5"],
            "unknown reefine setting recipe.config.canary-shares",
        ),
        (
            ["--recipe.name", "reefine", "--recipe.config.max-edits", "many"],
            "recipe.config.max-edits must be a whole number, not 'many'",
        ),
        (
            ["--recipe.name", "reefine", "--recipe.config.held-out-share", "1.5"],
            "recipe.config.held-out-share",
        ),
        (
            ["--recipe.name", "reefine", "--recipe.config.canary-share", "1"],
            "recipe.config.canary-share must be at least 0 (off) and below 1",
        ),
        (
            [
                "--recipe.name",
                "reefine",
                "--recipe.config.canary-share",
                "0.2",
                "--recipe.config.canary-alpha",
                "x",
            ],
            "recipe.config.canary-alpha must be a number",
        ),
        (
            ["--recipe.name", "grpo", "--recipe.config.lora-rnak", "8"],
            "unknown grpo setting recipe.config.lora-rnak",
        ),
    ],
)
def test_a_bad_recipe_setting_exits_2_naming_it_before_serving(
    tmp_path: Path, upstream: ScriptedUpstream, flags: list[str], named: str
):
    run = subprocess.run(
        [
            sys.executable, "-m", "reef_cli", "serve",
            "--storage.state-dir", str(tmp_path / "state"),
            "--inference.upstream-url", upstream.url,
            "--reef.port", "0",
            *flags,
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2, run.stdout + run.stderr
    assert named in run.stderr
    assert not upstream.requests  # nothing was served
