"""opencode's health check: the real ``opencode run`` starts with a candidate's config dir and
answers, routed through reef.

:class:`OpencodeHealth` is the template of :mod:`adapters.health` with opencode's names:
``$REEF_OPENCODE``, else the project's ``.cache/tools/opencode`` install (``scripts/setup.sh
--dev``), else PATH, :data:`~adapters.opencode.launcher.OPENCODE_MIN_VERSION` or newer.  The
rendered files go into a fresh ``OPENCODE_CONFIG_DIR``; the sandbox's ``HOME`` holds opencode's
own folders (the person's ``~/.config/opencode`` and sessions stay out), with the npm stubs in its
global config dir too, so no run reaches npm.  opencode runs as ``opencode run <task>`` with the
routing of :meth:`OpencodeHealth.routing` (the key, the scenario, a run and release tag of
``health``, ``x-reef-capture: false`` from ``REEF_CAPTURE``), its traffic switches and LSP
downloads off, and ``REEF_OPENCODE_LAUNCHER=true``: reef's plugin then does nothing (the check is
about the candidate's entries, and the plugin would call the daemon).

A check passes when opencode exits 0 and prints the answer on stdout (the line naming the agent
and the model, ``> build · <model>``, goes to stderr).  What opencode 1.18 does
with a broken candidate (found by experiment): an ``opencode.json`` it cannot parse or that its
schema refuses: exit 1 before any request, the problem on stderr; a plugin that throws when it
loads: exit 1; a turn that fails upstream: exit 1 with ``Error: …``; a skill or command it cannot
use is left out silently: not detectable from its output.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from adapters.health import HarnessHealth, Sandbox, env_routing
from adapters.opencode.launcher import OPENCODE_MIN_VERSION, TRAFFIC_SWITCHES
from adapters.opencode.render import NPM_STUBS
from reef_core.procs import ProcessRun, first_line

__all__ = ["OPENCODE_MIN_VERSION", "OpencodeHealth"]


class OpencodeHealth(HarnessHealth):
    """opencode's health check (see the module docstring)."""

    adapter = "opencode"
    label = "opencode"
    min_version = OPENCODE_MIN_VERSION
    metric = "health_seconds"
    capture_env = "REEF_CAPTURE"
    binary = "opencode"
    binary_env = "REEF_OPENCODE"
    project = Path(".cache/tools/opencode/node_modules/.bin/opencode")
    folder = "config"
    config_env = "OPENCODE_CONFIG_DIR"
    prefix = "reef-health-opencode-"
    no_version = "did not report a version (does its native binary start?)"
    quiet: Mapping[str, str] = {
        **TRAFFIC_SWITCHES,
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "REEF_OPENCODE_LAUNCHER": "true",
    }
    dropped = (
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENCODE_CONFIG",
        "OPENCODE_CONFIG_CONTENT",
    )

    def not_found(self, notes: list[str]) -> str:
        said = "; ".join(notes)
        return f"opencode {OPENCODE_MIN_VERSION} or newer not found ({said}): run scripts/setup.sh --dev"

    def missing(self, env: Mapping[str, str] | None = None) -> str:
        return (
            f"opencode {OPENCODE_MIN_VERSION} or newer was not found: run scripts/setup.sh --dev, "
            "or set REEF_OPENCODE"
        )

    def routing(self, reef_url: str, scenario: str, token: str | None = None) -> dict[str, str]:
        return env_routing(scenario, token, tagged=True)

    def prepare(self, box: Sandbox) -> None:
        # opencode's global config dir is a config dir too: without the stubs it runs npm there
        global_config = box.home / ".config" / "opencode"
        for name, content in NPM_STUBS.items():
            path = global_config / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)

    def argv(self, task: str) -> list[str]:
        return ["run", task]

    def problem(self, run: ProcessRun, box: Sandbox) -> str | None:
        if run.returncode != 0:
            lines = run.stderr.splitlines()
            said = next((line for line in lines if "Error" in line), None)
            said = box.quote(said or first_line("\n".join(lines[-5:])) or "no message")
            return f"opencode exited {run.returncode}: {said}"
        return None
