"""``reef install SCENARIO --adapter pi``: the CLI fetches the daemon's installer and runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reef_cli.main import app
from tests.adapters.conftest import SCENARIO, Machine

pytestmark = pytest.mark.e2e

REEF = str(Path(sys.executable).with_name("reef"))


def test_install_prints_the_script_or_runs_it(reefine, machine: Machine):
    reef = reefine()
    printed = CliRunner().invoke(app, ["install", SCENARIO, "--adapter", "pi", "--print", "--url", reef.url])
    assert printed.exit_code == 0, printed.output
    assert printed.output.startswith("#!/bin/sh") and "reef-pi" in printed.output
    assert not Path(reef.repo(SCENARIO)).exists()  # fetching the script changes nothing

    ran = subprocess.run(
        [REEF, "install", SCENARIO, "--adapter", "pi", "--url", reef.url],
        env=machine.env,
        cwd=machine.home,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert machine.launcher.exists()
    assert (machine.agent / "models.json").exists()
    assert machine.sidecar()["scenario"] == SCENARIO
    assert reef.reader(SCENARIO).installed_adapters() == {"pi"}  # noted once the script ran


def test_the_launchers_update_notes_the_install_that_a_fetched_script_does_not(reefine, machine: Machine):
    reef = reefine()
    machine.install(reef)  # curl … | sh: the GET noted nothing, and no request was made yet
    assert not Path(reef.repo(SCENARIO)).exists()
    updated = machine.reef_pi("update")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert reef.reader(SCENARIO).installed_adapters() == {"pi"}


def test_install_names_a_bad_adapter_or_release(reefine):
    reef = reefine()
    bad = CliRunner().invoke(app, ["install", SCENARIO, "--adapter", "vim", "--url", reef.url])
    assert bad.exit_code == 2 and "--adapter must be one of" in bad.output
    missing = CliRunner().invoke(app, ["install", SCENARIO, "--release", "v9", "--url", reef.url])
    assert missing.exit_code == 1 and "v9" in missing.output
