"""Claude Code's health check: the real ``claude`` starts with a candidate's config dir and
answers, routed through reef.

:class:`ClaudeCodeHealth` is the template of :mod:`adapters.health` with Claude Code's names:
``$REEF_CLAUDE``, else the project's ``.cache/tools/claude-code`` install (``scripts/setup.sh
--dev``), else PATH, :data:`~adapters.claude_code.launcher.CLAUDE_MIN_VERSION` or newer.  The
rendered files (``settings.json``, ``rules/``, ``skills/``, ``commands/``, ``config/``) go into a
fresh ``CLAUDE_CONFIG_DIR``, so the person's ``~/.claude`` and ``~/.claude.json`` stay out;
``<config>/.claude.json`` is seeded with finished onboarding and trust for the cwd
(:func:`adapters.claude_code.launcher.seed_state`, the only gates Claude Code has, verified with
2.1.332).  Claude runs as ``claude -p <task>`` with the traffic switches on (no network but
reef's), ``CLAUDE_CODE_MAX_RETRIES=1`` (a failing endpoint fails in about a second), and the
routing of :meth:`ClaudeCodeHealth.routing` (:func:`claude_routing`): reef's URL, the token or a
placeholder, ``x-reef-scenario`` and ``x-reef-capture: false``.  ``ANTHROPIC_API_KEY`` is dropped
(it would ask for approval, and beat the routing).

A check passes when claude exits 0, prints an answer on stdout, reports no settings problem on
stderr and no hook blocked the task.  What Claude Code 2.1.332 does with a broken candidate in
print mode (found by experiment):

- its endpoint failing: exit 1 and the error on **stdout**, e.g. ``API Error: 502 upstream failed
  (500): …`` or ``API Error: Connection refused …``; without any credential ``Not logged in ·
  Please run /login``.  This check quotes stdout's first line (stderr's when stdout is empty).
- ``settings.json`` that is not JSON or breaks Claude's schema (``{"permissions": {"allow":
  "Bash"}}``): exit 0 and the answer, but stderr says ``These settings did not load, so nothing in
  them is in effect, including hooks, …`` followed by an indented ``<path> (permissions.allow):
  Expected array, but received string``.  Nothing of that file is in effect, reef's own hooks
  included, so this check fails it, quoting the problem lines.  One bad entry among good ones
  (an unknown hook event or hook type) is ``These settings entries were skipped; …``: failed too.
- a ``UserPromptSubmit`` hook that blocks every prompt: exit 0, no model call, and stdout
  ``UserPromptSubmit operation blocked by hook: <reason>``: the task never reached the model, so
  this check fails it.
- a skill or rule Claude cannot use is left out silently: not detectable from its output.

reef's own hooks in the rendered ``settings.json`` call ``$REEF_CLAUDE_LAUNCHER``; here it is
``true``, so they do nothing (the check is about the candidate's entries, and those hooks would
call the daemon), while the candidate's hooks run as they would for a person.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from adapters.claude_code.launcher import CLAUDE_MIN_VERSION, seed_state
from adapters.claude_code.render import TRAFFIC_SWITCHES
from adapters.health import HarnessHealth, Sandbox, indented_after
from reef_core.errors import InvalidInput
from reef_core.harness.health import HarnessBinary, HealthResult
from reef_core.procs import ProcessRun, first_line, last_line

__all__ = [
    "CLAUDE_MIN_VERSION",
    "ClaudeCodeHealth",
    "claude_routing",
    "find_claude",
    "missing_claude",
    "run_claude_health",
]

_PLACEHOLDER_TOKEN = "reef-local"  # Claude Code will not start without some credential
# Claude Code's report of a settings file it could not (fully) load; problem lines follow, indented
_SETTINGS_PROBLEM = re.compile(r"^These settings (did not load|entries were skipped)\b")
_BLOCKED = "operation blocked by hook"


class ClaudeCodeHealth(HarnessHealth):
    """Claude Code's health check (see the module docstring)."""

    adapter = "claude_code"
    label = "Claude Code"
    min_version = CLAUDE_MIN_VERSION
    metric = "claude_health_seconds"
    capture_env = None  # the routing's headers say x-reef-capture: false
    binary = "claude"
    binary_env = "REEF_CLAUDE"
    project = Path(".cache/tools/claude-code/node_modules/.bin/claude")
    folder = "config"
    config_env = "CLAUDE_CONFIG_DIR"
    prefix = "reef-claude-health-"
    quiet: Mapping[str, str] = {
        "LANG": "C.UTF-8",
        "CLAUDE_CODE_MAX_RETRIES": "1",
        "REEF_CLAUDE_LAUNCHER": "true",  # reef's own hooks do nothing here (module docstring)
        **TRAFFIC_SWITCHES,
    }
    probe_env = TRAFFIC_SWITCHES
    dropped = ("ANTHROPIC_API_KEY",)

    def not_found(self, notes: list[str]) -> str:
        why = f" ({'; '.join(notes)})" if notes else ""
        return (
            f"Claude Code {CLAUDE_MIN_VERSION} or newer was not found{why}: run scripts/setup.sh --dev, "
            "or point REEF_CLAUDE at a claude binary"
        )

    def missing(self, env: Mapping[str, str] | None = None) -> str:
        return self.not_found(self.search(os.environ if env is None else env)[1])

    def routing(self, reef_url: str, scenario: str, token: str | None = None) -> dict[str, str]:
        return {
            "ANTHROPIC_BASE_URL": reef_url,
            "ANTHROPIC_AUTH_TOKEN": token or _PLACEHOLDER_TOKEN,
            "ANTHROPIC_CUSTOM_HEADERS": f"x-reef-scenario: {scenario}\nx-reef-capture: false",
        }

    def validate(self, files: Mapping[str, bytes], task: str, timeout: float) -> None:
        super().validate(files, task, timeout)
        if ".claude.json" in files:
            raise InvalidInput(
                "the config dir's .claude.json is the health check's own", field=".claude.json"
            )

    def prepare(self, box: Sandbox) -> None:
        seed_state(box.config, str(box.cwd))

    def argv(self, task: str) -> list[str]:
        return ["-p", task]

    def last_words(self, run: ProcessRun) -> str:
        return last_line(run.stdout) or last_line(run.stderr)

    def problem(self, run: ProcessRun, box: Sandbox) -> str | None:
        if run.returncode != 0:
            said = box.quote(first_line(run.stdout) or first_line(run.stderr)) or "no message"
            return f"claude exited {run.returncode}: {said}"
        problem = _settings_problem(run.stderr)
        if problem:
            return f"Claude Code could not load the candidate's settings: {box.quote(problem)}"
        if _BLOCKED in first_line(run.stdout):
            said = box.quote(" ".join(run.stdout.strip().splitlines()[:2]))
            return f"a hook kept the health task from the model: {said}"
        return None


def _settings_problem(stderr: str) -> str | None:
    """Claude Code's first report of a settings file it did not (fully) load, with the problem
    lines that follow it: ``These settings did not load: <path> (<key>): <why>``."""
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        match = _SETTINGS_PROBLEM.match(line)
        if match:
            problems = [follow.strip() for follow in indented_after(lines[i + 1 :])]
            head = f"These settings {match.group(1)}"
            return f"{head}: {'; '.join(problems)}" if problems else line
    return None


_CLAUDE = ClaudeCodeHealth()


def find_claude(*, env: Mapping[str, str] | None = None) -> HarnessBinary | None:
    """Claude Code :data:`CLAUDE_MIN_VERSION` or newer: ``$REEF_CLAUDE``, else the project's
    install, else ``claude`` on PATH (``env`` defaults to the process environment)."""
    return _CLAUDE.find(env)


def missing_claude(*, env: Mapping[str, str] | None = None) -> str:
    """Why no claude was found, and how to install one: a check's detail."""
    return _CLAUDE.missing(env)


def claude_routing(url: str, scenario: str, token: str | None = None) -> dict[str, str]:
    """The environment that sends claude's requests to reef at ``url`` for ``scenario``, not
    recorded (``x-reef-capture: false``), with ``token`` or a placeholder as its credential."""
    return _CLAUDE.routing(url, scenario, token)


def run_claude_health(
    files: Mapping[str, bytes], *, claude: HarnessBinary | None = None, **options: Any
) -> HealthResult:
    """:meth:`ClaudeCodeHealth.run` (its keyword arguments: ``env``, ``task``, ``timeout``,
    ``workdir``) with ``files`` as claude's config dir and ``claude`` the binary (default:
    :func:`find_claude`'s)."""
    return _CLAUDE.run(files, binary=claude, **options)
