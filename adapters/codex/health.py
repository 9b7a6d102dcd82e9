"""Codex's health check: the real ``codex exec`` starts with a candidate's home and answers,
routed through reef.

:class:`CodexHealth` is the template of :mod:`adapters.health` with Codex's names: ``$REEF_CODEX``,
else the project's ``.cache/tools/codex`` install (``scripts/setup.sh --dev``), else PATH,
:data:`~adapters.codex.launcher.CODEX_MIN_VERSION` or newer.  The rendered files go into a fresh
``CODEX_HOME`` (the person's ``~/.codex`` stays out), ``config.toml`` is written from the
candidate's ``reef-config.toml`` as ``reef-codex`` writes it, and Codex runs as ``codex exec
--skip-git-repo-check --ephemeral <task>`` (stdin on /dev/null: exec would read it as more of
the task), with the routing of :meth:`CodexHealth.routing`: the key, the scenario, a run and
release tag of ``health``, and ``x-reef-capture: false`` from ``REEF_CAPTURE``.  The rendered
provider fails a refused connection at once (``unbounded_connection_retries`` off).

A check passes when codex exits 0 and prints the answer on stdout (exec prints only the final
message there).  What Codex 0.171 does with a broken candidate (found by experiment): a
``config.toml`` it cannot parse or whose values have the wrong type: exit 1 before any request,
``Error loading config.toml: …`` on stderr; a turn that fails upstream: exit 1, the error on
stderr.  reef's hooks are not trusted in the sandbox, so exec leaves them out; a skill it cannot
use is left out silently: not detectable from its output.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from adapters.codex.launcher import CODEX_MIN_VERSION, write_config
from adapters.codex.render import REEF_CONFIG
from adapters.health import HarnessHealth, Sandbox, env_routing
from reef_core.procs import ProcessRun, first_line

__all__ = ["CODEX_MIN_VERSION", "CodexHealth"]

_CONFIG_ERROR = ("Error loading config", "error loading config", "Error: ")


class CodexHealth(HarnessHealth):
    """Codex's health check (see the module docstring)."""

    adapter = "codex"
    label = "Codex"
    min_version = CODEX_MIN_VERSION
    metric = "health_seconds"
    capture_env = "REEF_CAPTURE"
    binary = "codex"
    binary_env = "REEF_CODEX"
    project = Path(".cache/tools/codex/node_modules/.bin/codex")
    folder = "codex-home"  # not "home": the sandbox has a HOME of that name
    config_env = "CODEX_HOME"
    prefix = "reef-health-codex-"
    no_version = "did not report a version (does its native binary start?)"
    dropped = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_API_KEY")

    def not_found(self, notes: list[str]) -> str:
        said = "; ".join(notes)
        return f"codex {CODEX_MIN_VERSION} or newer not found ({said}): run scripts/setup.sh --dev"

    def missing(self, env: Mapping[str, str] | None = None) -> str:
        return (
            f"codex {CODEX_MIN_VERSION} or newer was not found: run scripts/setup.sh --dev, or set REEF_CODEX"
        )

    def routing(self, reef_url: str, scenario: str, token: str | None = None) -> dict[str, str]:
        return env_routing(scenario, token, tagged=True)

    def prepare(self, box: Sandbox) -> None:
        if (box.config / REEF_CONFIG).exists():
            write_config(box.config)

    def argv(self, task: str) -> list[str]:
        return ["exec", "--skip-git-repo-check", "--ephemeral", task]

    def problem(self, run: ProcessRun, box: Sandbox) -> str | None:
        if run.returncode != 0:
            lines = [line for line in run.stderr.splitlines() if not line.startswith("WARNING: proceeding")]
            said = next((line for line in lines if line.startswith(_CONFIG_ERROR)), None)
            said = box.quote(said or first_line("\n".join(lines[-5:])) or "no message")
            return f"codex exited {run.returncode}: {said}"
        return None
