"""The "health" release check for Claude Code: the real ``claude`` starts with a candidate's config
dir and answers, routed through reef.

Owns: finding a Claude Code binary (:func:`find_claude`), the environment that routes it through
reef unrecorded (:func:`claude_routing`) and one sandboxed print-mode run of it
(:func:`run_claude_health`).  The candidate's rendered files (``settings.json``, ``rules/``,
``skills/``, ``commands/``, ``config/``) are written byte for byte into a fresh
``CLAUDE_CONFIG_DIR`` next to a fresh ``HOME`` and a fresh cwd, so the user's ``~/.claude`` and
``~/.claude.json`` stay out; ``<config>/.claude.json`` is seeded with finished onboarding and
trust for the cwd (the only gates Claude Code has, verified with 2.1.332).  Claude runs as
``claude -p <task>`` with stdin on /dev/null, the traffic switches on (no network but reef's),
``CLAUDE_CODE_MAX_RETRIES=1`` (a failing endpoint fails in about a second) and in its own process
group, killed at the timeout (:func:`recipes.reefine.health.run_captured`).

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
call the daemon), while the candidate's hooks run as they would for a person.  Quotes lose the
sandbox's prefix (``settings.json``, not a temporary path) and are cut to 300 characters.
Limits: Claude Code reads ``CLAUDE.md`` from every ancestor of its cwd, so one in the system temp
dir would reach the prompt; a child that a hook moves into a new session escapes the kill.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from adapters.claude_code.launcher import CLAUDE_MIN_VERSION
from adapters.claude_code.render import TRAFFIC_SWITCHES
from adapters.launcher import version_at_least
from recipes.reefine.health import (
    HEALTH_TASK,
    HealthResult,
    first_line,
    indented_after,
    last_line,
    minimal_path,
    probed_version,
    quote,
    run_captured,
    validate_files,
)
from reef_core.errors import InvalidInput

__all__ = [
    "CLAUDE_MIN_VERSION",
    "ClaudeBinary",
    "claude_routing",
    "find_claude",
    "missing_claude",
    "run_claude_health",
]

_PROJECT_ROOT = Path(__file__).resolve().parents[2]
_PROJECT_CLAUDE = _PROJECT_ROOT / ".cache" / "tools" / "claude-code" / "node_modules" / ".bin" / "claude"
_ANSWER_PREVIEW = 80
_STDERR_TAIL = 4000
_PLACEHOLDER_TOKEN = "reef-local"  # Claude Code will not start without some credential

# Claude Code's report of a settings file it could not (fully) load; problem lines follow, indented
_SETTINGS_PROBLEM = re.compile(r"^These settings (did not load|entries were skipped)\b")
_BLOCKED = "operation blocked by hook"


@dataclass(frozen=True)
class ClaudeBinary:
    """A claude executable whose ``--version`` said ``version``."""

    path: Path
    version: str


# -------------------------------------------------------------------------------- finding claude


def find_claude(*, env: Mapping[str, str] | None = None) -> ClaudeBinary | None:
    """Claude Code :data:`CLAUDE_MIN_VERSION` or newer: ``$REEF_CLAUDE``, else the project's
    ``.cache/tools/claude-code`` install (``scripts/setup.sh --dev``), else ``claude`` on PATH.

    ``env`` defaults to the process environment.  An explicit ``REEF_CLAUDE`` is the only
    candidate when set: a wrong one there is a misconfiguration, not a reason to pick another.
    """
    found, _ = _search(os.environ if env is None else env)
    return found


def missing_claude(*, env: Mapping[str, str] | None = None) -> str:
    """Why no claude was found, and how to install one: a check's detail."""
    _, notes = _search(os.environ if env is None else env)
    why = f" ({'; '.join(notes)})" if notes else ""
    return (
        f"Claude Code {CLAUDE_MIN_VERSION} or newer was not found{why}: run scripts/setup.sh --dev, "
        "or point REEF_CLAUDE at a claude binary"
    )


def _search(env: Mapping[str, str]) -> tuple[ClaudeBinary | None, list[str]]:
    explicit = env.get("REEF_CLAUDE")
    candidates: list[tuple[str, Path]]
    if explicit:
        candidates = [("REEF_CLAUDE", Path(explicit).expanduser())]
    else:
        on_path = shutil.which("claude", path=env.get("PATH", os.defpath))
        candidates = [("project", _PROJECT_CLAUDE), ("PATH", Path(on_path) if on_path else Path("claude"))]
    notes = []
    for origin, path in candidates:
        if not path.is_file():
            notes.append(f"{origin}: no {path}" if origin != "PATH" else "no claude on PATH")
            continue
        if not os.access(path, os.X_OK):
            notes.append(f"{origin}: {path} is not executable")
            continue
        version = _version_of(path)
        if version is not None and version_at_least(version, CLAUDE_MIN_VERSION):
            return ClaudeBinary(path.absolute(), version), notes
        said = f"is Claude Code {version}" if version else "did not report a version"
        notes.append(f"{origin}: {path} {said}, reef needs {CLAUDE_MIN_VERSION} or newer")
    return None, notes


def _version_of(path: Path) -> str | None:
    """What ``claude --version`` says (``2.1.332 (Claude Code)``), probed once per binary."""
    return probed_version(
        str(path.resolve()),
        path.stat().st_mtime_ns,
        minimal_path(os.environ, path),
        homes=("HOME", "CLAUDE_CONFIG_DIR"),
        extra=tuple(TRAFFIC_SWITCHES.items()),
    )


# -------------------------------------------------------------------------------- running claude


def claude_routing(url: str, scenario: str, token: str | None = None) -> dict[str, str]:
    """The environment that sends claude's requests to reef at ``url`` for ``scenario``, not
    recorded (``x-reef-capture: false``), with ``token`` or a placeholder as its credential."""
    return {
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_AUTH_TOKEN": token or _PLACEHOLDER_TOKEN,
        "ANTHROPIC_CUSTOM_HEADERS": f"x-reef-scenario: {scenario}\nx-reef-capture: false",
    }


def run_claude_health(
    files: Mapping[str, bytes],
    *,
    env: Mapping[str, str],
    task: str = HEALTH_TASK,
    timeout: float = 60.0,
    claude: ClaudeBinary | None = None,
    workdir: Path | None = None,
) -> HealthResult:
    """Run claude once on ``task`` with ``files`` as its config dir and judge the outcome.

    ``files`` maps paths relative to the config dir (``settings.json``, ``rules/x.md``) to
    contents.  ``env`` is laid over a minimal environment (PATH, the traffic switches, one retry)
    and carries the routing (:func:`claude_routing`); ``HOME`` and ``CLAUDE_CONFIG_DIR`` are
    always the sandbox's.  ``claude`` defaults to :func:`find_claude` (with ``env`` over the
    process environment).  The sandbox lives in a temporary directory under ``workdir`` (default:
    the system temp dir) and is removed afterwards.
    """
    _validate(files, task, timeout)
    if claude is None:
        search_env = {**os.environ, **env}
        claude = find_claude(env=search_env)
        if claude is None:
            return HealthResult(False, missing_claude(env=search_env), 0.0, "", "")
    with tempfile.TemporaryDirectory(
        prefix="reef-claude-health-", dir=workdir, ignore_cleanup_errors=True
    ) as tmp:
        root = Path(tmp)
        config, home, cwd = root / "config", root / "home", root / "cwd"
        for directory in (config, home, cwd):
            directory.mkdir()
        for name, content in files.items():
            target = config / PurePosixPath(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        seed = {"hasCompletedOnboarding": True, "projects": {str(cwd): {"hasTrustDialogAccepted": True}}}
        (config / ".claude.json").write_text(json.dumps(seed) + "\n")
        full_env = {
            "PATH": minimal_path(os.environ, claude.path),
            "LANG": "C.UTF-8",
            "CLAUDE_CODE_MAX_RETRIES": "1",
            "REEF_CLAUDE_LAUNCHER": "true",  # reef's own hooks do nothing here (module docstring)
            **TRAFFIC_SWITCHES,
            **env,
            "HOME": str(home),  # isolation is the point of the check
            "CLAUDE_CONFIG_DIR": str(config),
        }
        full_env.pop("ANTHROPIC_API_KEY", None)  # it would ask for approval, and beat the routing
        try:
            run = run_captured(
                [str(claude.path), "-p", task], cwd=cwd, env=full_env, timeout=timeout, scratch=root
            )
        except OSError as exc:
            return HealthResult(False, f"claude could not be started: {exc}", 0.0, "", "")

        def show(text: str) -> str:
            return quote(text, config, root)

        answer = run.stdout.strip()
        tail = run.stderr[-_STDERR_TAIL:]
        problem = _settings_problem(run.stderr)
        if run.returncode is None:
            last = show(last_line(run.stdout) or last_line(run.stderr))
            detail = f"claude did not finish within {timeout:g}s and was killed" + (
                f": {last}" if last else ""
            )
        elif run.returncode != 0:
            said = show(first_line(run.stdout) or first_line(run.stderr)) or "no message"
            detail = f"claude exited {run.returncode}: {said}"
        elif problem:
            detail = f"Claude Code could not load the candidate's settings: {show(problem)}"
        elif _BLOCKED in first_line(run.stdout):
            detail = f"a hook kept the health task from the model: {show(' '.join(answer.splitlines()[:2]))}"
        elif not answer:
            detail = "claude exited 0 but printed no answer"
        else:
            preview = " ".join(answer.split())[:_ANSWER_PREVIEW]
            detail = f"Claude Code {claude.version} answered in {run.seconds:.1f}s: {preview!r}"
            return HealthResult(True, detail, run.seconds, answer, tail)
        return HealthResult(False, detail, run.seconds, answer, tail)


def _validate(files: Mapping[str, bytes], task: str, timeout: float) -> None:
    validate_files(files, task, timeout, folder="config")
    if ".claude.json" in files:
        raise InvalidInput("the config dir's .claude.json is the health check's own", field=".claude.json")


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
