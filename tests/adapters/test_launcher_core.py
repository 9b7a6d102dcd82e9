"""The launcher core (``adapters.launcher``): the verbs it dispatches, the names a harness derives,
and a run path that loads no verb."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from adapters.claude_code.launcher import CLAUDE
from adapters.launcher import COMMANDS
from adapters.pi.launcher import PI
from adapters.verbs import VERBS

ROOT = Path(__file__).resolve().parents[2]


def test_every_command_has_its_verb():
    assert set(VERBS) == set(COMMANDS)


def test_a_harness_names_its_launcher_and_variables_after_its_binary():
    assert (PI.command, PI.binary_env, PI.launcher_env) == ("reef-pi", "REEF_PI", "REEF_PI_LAUNCHER")
    assert (CLAUDE.command, CLAUDE.binary_env, CLAUDE.launcher_env) == (
        "reef-claude",
        "REEF_CLAUDE",
        "REEF_CLAUDE_LAUNCHER",
    )


def test_the_run_path_loads_no_verb_and_no_http_client():
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, adapters.pi.launcher, adapters.claude_code.launcher; "
            "heavy = ('adapters.verbs', 'adapters.doctor', 'httpx', 'pygit2'); "
            "print(sorted(m for m in heavy if m in sys.modules))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == "[]"
