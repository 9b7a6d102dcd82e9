"""pi's health check: the real pi starts with a candidate's agent files and answers.

:class:`PiHealth` is the template of :mod:`adapters.health` with pi's names: ``$REEF_PI``, else
the project's ``.cache/tools`` pi, else PATH, :data:`~adapters.pi.launcher.PI_MIN_VERSION` or
newer; the files go into a fresh agent dir (``PI_CODING_AGENT_DIR``) with pi's offline switches
on, and pi runs as ``pi --offline -p --no-session <task>``.  The rendered ``models.json`` reads
the scenario, the key and ``x-reef-capture`` from the environment, so :meth:`PiHealth.routing`
sets ``REEF_SCENARIO``, ``REEF_API_KEY`` and ``REEF_CAPTURE=false`` (render the files with
``x-reef-capture`` read from ``REEF_CAPTURE``: :attr:`PiHealth.capture_env`).  A check passes
when pi exits 0, prints an answer on stdout, and reports no extension or settings failure on
stderr.  The agent proposer runs pi with :meth:`PiHealth.environment` too.

Agent-level retries are switched off through a project ``.pi/settings.json`` in the fresh cwd
(``{"retry": {"enabled": false}}``): pi deep-merges project settings over the agent dir's, so the
candidate's own ``settings.json`` is neither parsed nor rewritten and means what it says.  The
SDK's own retries stay on: a refused connection fails in about 2 s instead of about 20 s.

What pi 0.73.1 does with a broken tree in print mode (found by experiment; exit code, stderr):

- (a) an extension ``.ts`` with a syntax error: exit 1 before any request, ``Error: Failed to
  load extension "<path>": Failed to load extension: ParseError: Unexpected token`` followed by
  an indented `` <path>:<line>:<col>`` line.
- (b) an extension that throws while loading (top level or in its factory, sync or async):
  exit 1, ``Error: Failed to load extension "<path>": Failed to load extension: <message>``;
  a file without a default-exported factory: ``… Extension does not export a valid factory
  function: <path>``.  One that throws later, in an event handler such as ``session_start``,
  does not stop pi: exit 0, the answer on stdout and ``Extension error (<path>): <message>`` on
  stderr.  This check fails that too.
- (c) a skill without a ``description``: exit 0, nothing on stderr; pi silently leaves the skill
  out of the system prompt (print mode never prints skill diagnostics).  Not detectable from
  pi's output, so this check passes it.
- (d) ``models.json`` that is not valid JSON (or breaks the schema): pi ignores the whole file,
  falls back to its built-in default model and exits 1 with ``No API key found for the selected
  model.``; the real cause appears only in ``pi --list-models`` (``Warning: errors loading
  models.json:`` then ``Failed to parse models.json: <message>``).  After a failed run, this
  check asks ``pi --offline --list-models`` in the same sandbox and quotes that line.
- ``settings.json`` that is not valid JSON: pi ignores it, warns ``Warning: (runtime creation,
  global settings) <message>`` and still exits 0 with whatever model it picked; this check
  fails it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from adapters.health import HarnessHealth, Sandbox, env_routing, indented_after
from adapters.pi.launcher import PI_MIN_VERSION
from reef_core.harness.health import HarnessBinary, HealthResult
from reef_core.procs import ProcessRun, first_line

__all__ = ["PI_MIN_VERSION", "PiHealth", "find_pi", "probe_pi", "run_health"]

_MODELS_PROBE_TIMEOUT = 10.0
# Lines by which pi reports a candidate it could not (fully) load; see the module docstring.
_LOAD_FAILURE = re.compile(
    r"^(Error: Failed to load extension |Extension error \(|Warning: \([^)]*settings\) )"
)
_MODELS_ERROR = "errors loading models.json:"


class PiHealth(HarnessHealth):
    """pi's health check (see the module docstring)."""

    adapter = "pi"
    label = "pi"
    min_version = PI_MIN_VERSION
    metric = "health_seconds"
    capture_env = "REEF_CAPTURE"
    binary = "pi"
    binary_env = "REEF_PI"
    project = Path(".cache/tools/node_modules/.bin/pi")
    folder = "agent"
    config_env = "PI_CODING_AGENT_DIR"
    prefix = "reef-health-"
    no_version = "did not report a version (does its node start?)"
    quiet: Mapping[str, str] = {"PI_OFFLINE": "1", "PI_SKIP_VERSION_CHECK": "1", "PI_TELEMETRY": "0"}
    probe_env: Mapping[str, str] = {"PI_OFFLINE": "1"}

    def not_found(self, notes: list[str]) -> str:
        return f"pi {PI_MIN_VERSION} or newer not found ({'; '.join(notes)}): run scripts/setup.sh"

    def missing(self, env: Mapping[str, str] | None = None) -> str:
        return f"pi {PI_MIN_VERSION} or newer was not found: run scripts/setup.sh --dev, or set REEF_PI"

    def routing(self, reef_url: str, scenario: str, token: str | None = None) -> dict[str, str]:
        return env_routing(scenario, token, tagged=False)

    def prepare(self, box: Sandbox) -> None:
        # deep-merged over the candidate's settings.json; see the module docstring
        (box.cwd / ".pi").mkdir()
        (box.cwd / ".pi" / "settings.json").write_text('{"retry": {"enabled": false}}\n')

    def argv(self, task: str) -> list[str]:
        return ["--offline", "-p", "--no-session", task]

    def problem(self, run: ProcessRun, box: Sandbox) -> str | None:
        loaded = _load_failure(run.stderr, box)
        if loaded:
            return f"pi could not load the candidate: {loaded}"
        if run.returncode != 0:
            said = box.quote(first_line(run.stderr)) or "no message"
            cause = self._models_error(box) if "models.json" in box.files else None
            said = f"{cause} (print mode said: {said})" if cause else said
            return f"pi exited {run.returncode}: {said}"
        return None

    def _models_error(self, box: Sandbox) -> str | None:
        """Why pi rejected models.json, which print mode never says but ``--list-models`` does."""
        run = self.start(box, ["--offline", "--list-models"], _MODELS_PROBE_TIMEOUT)
        lines = run.stderr.splitlines()
        for i, line in enumerate(lines):
            if _MODELS_ERROR in line:
                reason = []
                for follow in lines[i + 1 :]:
                    if not follow.strip() or follow.startswith("File: "):
                        break
                    reason.append(follow.strip())
                return box.quote(" ".join(reason)) or None
        return None


def _load_failure(stderr: str, box: Sandbox) -> str | None:
    """pi's first report of a part it could not load, with its continuation lines, quoted."""
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        if _LOAD_FAILURE.match(line):
            # a ParseError names the file and position on the next, indented line
            return box.quote(" ".join([line, *indented_after(lines[i + 1 :])]))
    return None


_PI = PiHealth()


def find_pi(*, env: Mapping[str, str] | None = None) -> HarnessBinary | None:
    """A pi :data:`PI_MIN_VERSION` or newer: ``$REEF_PI``, else the project's ``.cache/tools``
    install, else ``pi`` on PATH (``env`` defaults to the process environment)."""
    return _PI.find(env)


def probe_pi(path: Path, *, env: Mapping[str, str] | None = None) -> HarnessBinary | None:
    """The pi at ``path`` with the version its ``--version`` reports, whatever that is."""
    return _PI.probe(path, env)


def run_health(
    agent_files: Mapping[str, bytes], *, pi: HarnessBinary | None = None, **options: Any
) -> HealthResult:
    """:meth:`PiHealth.run` (its keyword arguments: ``env``, ``task``, ``timeout``, ``workdir``)
    with ``agent_files`` as pi's agent dir and ``pi`` the binary (default: :func:`find_pi`'s)."""
    return _PI.run(agent_files, binary=pi, **options)
