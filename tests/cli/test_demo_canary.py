"""``reef demo --canary``, run for real: the demo's candidates serve a share of the simulated
user's sessions first, and only the sessions' scores publish them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reef_cli.main import app
from reef_core.learning.canary import ENDED
from reef_core.store import Store
from tests.cli.support import demo_state
from tests.recipes.conftest import TEST_PRETRAIN_SECONDS


@pytest.mark.parametrize("share", ["0", "1", "1.5", "-0.2"])
def test_a_share_outside_zero_to_one_is_refused_before_starting_anything(tmp_path: Path, share: str):
    result = CliRunner().invoke(app, ["demo", "--canary-share", share, "--state-dir", str(tmp_path / "d")])
    assert result.exit_code == 2, result.output
    assert "--canary-share must be above 0 and below 1" in result.output
    assert not (tmp_path / "d").exists()


@pytest.mark.slow
def test_the_canary_demo_shows_its_canaries_and_publishes_only_through_them(tmp_path: Path):
    state = demo_state(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "reef_cli", "demo", "--canary", "--canaries", "1", "--time-limit", "240",
         "--state-dir", str(state)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "REEF_TINY_PRETRAIN_SECONDS": TEST_PRETRAIN_SECONDS, "COLUMNS": "120"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    (repo,) = (state / "scenarios").glob("demo-*.git")
    reader = Store(state).reader(repo.name.removesuffix(".git"))
    history = reader.canary.history(limit=1000)  # refs/reef/canary: every state, newest first
    last = {}
    for canary in history:
        last.setdefault(canary["name"], canary)
    ended = [c for c in last.values() if c["state"] in ENDED]
    assert ended, history
    for canary in last.values():  # each began running against a release, and says so in git
        assert any(c["name"] == canary["name"] and c["state"] == "running" for c in history)
        assert re.fullmatch(r"v\d+", canary["base"]) and canary["share"] == 0.5
    for canary in ended:
        outcome = f"promoted as {canary['release']}" if canary["state"] == "promoted" else canary["state"]
        assert f"canary {canary['name']} against {canary['base']}: {outcome}" in result.stdout
    subjects = subprocess.run(
        ["git", "-C", str(repo), "log", "--format=%s", "refs/reef/canary"], capture_output=True, text=True
    ).stdout
    assert f"canary {ended[0]['name']} {ended[0]['state']}" in subjects

    releases = list(reader.releases)  # newest first
    assert releases[-1].name == "v1"
    promoted = {c["release"] for c in ended if c["state"] == "promoted"}
    for release in releases[:-1]:  # every release after v1 came from a canary the sessions promoted
        assert (release.verdict or "").startswith("canary:"), release
        assert release.name in promoted
