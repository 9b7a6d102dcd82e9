"""``reef-claude``: Claude Code routed through reef, and reef's commands for the person at the terminal.

The verbs (``evolve``, ``versions``, ``update``, ``report``, ``learn``, ``doctor``) are the shared
launcher's (:mod:`adapters.verbs`, :mod:`adapters.doctor`), and so is the environment every run
gets (:func:`adapters.launcher.prepare_run`); this module keeps what is Claude Code's own:

- **Routing by ``--settings``.**  Claude Code reads its endpoint from settings files and the
  environment, and a project's ``.claude/settings.json`` beats the environment: only
  ``--settings`` beats every file.  So each run writes its routing to a settings file of its own
  (``runs/<tag>.json`` next to the install, mode 0600: it holds the token) and passes it with
  ``--settings``: ``ANTHROPIC_BASE_URL`` = reef, ``ANTHROPIC_AUTH_TOKEN`` = ``REEF_TOKEN``, else the
  person's own Anthropic key (an open reef with no upstream key passes it on), else a placeholder,
  ``ANTHROPIC_CUSTOM_HEADERS`` with ``x-reef-scenario`` and ``x-reef-tag-run`` (and
  ``x-reef-tag-session`` when ``REEF_SESSION`` names one), and the five traffic switches.  A file,
  not inline JSON: an argument is readable by every user of the machine through ``ps``.  Files
  older than a day are removed at the next start.  ``ANTHROPIC_API_KEY`` is dropped from the
  environment (Claude Code would send it, and ask about it interactively).
- **A seeded state file.**  ``CLAUDE_CONFIG_DIR/.claude.json`` gets ``hasCompletedOnboarding`` (the
  onboarding screen tries the network even with the switches on) and trust for the directory
  Claude Code starts in, and only that one; Claude Code's own keys in that file are kept.
- **The hooks' environment.**  ``REEF_URL``, ``REEF_SCENARIO``, ``REEF_RUN_TAG`` and
  ``REEF_CLAUDE_LAUNCHER`` (every run's), and ``REEF_RUN_STARTED_MS``, are there for reef's hooks
  (:mod:`adapters.hooks`), which the rendered ``settings.json`` runs as
  ``reef-claude hook prompt`` and ``reef-claude hook session-start``.

``REEF_CLAUDE`` names the claude to run.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from adapters import launcher as core
from adapters.claude_code.render import TRAFFIC_SWITCHES
from adapters.launcher import Context

__all__ = ["CLAUDE", "CLAUDE_MIN_VERSION", "main", "routing", "seed_state"]

#: the oldest Claude Code reef accepts when one is found: the one its tests run (config dir,
#: --settings, blocking UserPromptSubmit hooks, SessionStart notices and every upstream kind,
#: tests/adapters/test_matrix.py); an older claude on PATH is passed over for the pinned one
CLAUDE_MIN_VERSION = "2.1.332"
_RUN_FILES_KEPT_S = 24 * 3600
_PLACEHOLDER_TOKEN = "reef-local"  # Claude Code will not start without some credential


def routing(ctx: Context, tag: str, tree: str | None = None) -> dict[str, Any]:
    """The ``--settings`` object of one run; ``tree`` names the release (or canary) it runs."""
    headers = [f"x-reef-scenario: {ctx.scenario}", f"x-reef-tag-run: {tag}"]
    if tree and tree != "none":
        headers.append(f"x-reef-tag-release: {tree}")
    if ctx.env.get("REEF_SESSION"):
        headers.append(f"x-reef-tag-session: {tag}")
    return {
        "env": {
            "ANTHROPIC_BASE_URL": ctx.url,
            "ANTHROPIC_AUTH_TOKEN": _credential(ctx),
            "ANTHROPIC_CUSTOM_HEADERS": "\n".join(headers),
            **TRAFFIC_SWITCHES,
        }
    }


def _credential(ctx: Context) -> str:
    """What Claude Code presents to reef: reef's token; else the person's own Anthropic key, which
    an open reef with no upstream key of its own passes through to the upstream; else a
    placeholder (Claude Code will not start without one)."""
    return (
        ctx.token
        or ctx.env.get("ANTHROPIC_AUTH_TOKEN")
        or ctx.env.get("ANTHROPIC_API_KEY")
        or _PLACEHOLDER_TOKEN
    )


def seed_state(config: Path, cwd: str) -> None:
    """Onboarding done and ``cwd`` trusted in ``config/.claude.json``, Claude Code's keys kept;
    nothing is written when both hold already."""
    path = config / ".claude.json"
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        state = {}
    except (OSError, ValueError):
        state = None  # not ours to repair: Claude Code rewrites it, or says what is wrong
    if not isinstance(state, dict):
        return
    projects = state.get("projects")
    if not isinstance(projects, dict):
        projects = state["projects"] = {}
    project = projects.get(cwd)
    if not isinstance(project, dict):
        project = projects[cwd] = {}
    if state.get("hasCompletedOnboarding") is True and project.get("hasTrustDialogAccepted") is True:
        return
    state["hasCompletedOnboarding"] = True
    project["hasTrustDialogAccepted"] = True
    core.write_json(path, state, mode=0o600)


def _prune(runs: Path, now: float) -> None:
    try:
        old = [
            p for p in runs.iterdir() if p.suffix == ".json" and now - p.stat().st_mtime > _RUN_FILES_KEPT_S
        ]
    except OSError:
        return
    for path in old:
        path.unlink(missing_ok=True)


def _run_claude(ctx: Context, args: list[str]) -> int:
    base = {k: v for k, v in ctx.env.items() if k not in ("ANTHROPIC_API_KEY", "CLAUDECODE")}
    tag, claude, run_env = core.prepare_run(ctx, args, base)
    now = time.time()
    runs = ctx.layout.base / "runs"
    _prune(runs, now)
    settings = runs / f"{tag}.json"
    core.write_json(settings, routing(ctx, tag, run_env.get("REEF_RELEASE_TAG")), mode=0o600)
    seed_state(Path(run_env[ctx.harness.config_env]), os.getcwd())
    run_env["REEF_RUN_STARTED_MS"] = str(int(now * 1000))
    return core.exec_harness(ctx, claude, ["--settings", str(settings), *args], run_env)


CLAUDE = core.Harness(
    adapter="claude_code",
    binary="claude",
    label="Claude Code",
    config_dir="config",
    config_env="CLAUDE_CONFIG_DIR",
    min_version=CLAUDE_MIN_VERSION,
    run=_run_claude,
    extra={"hook": core.hook_verb},
)


main = core.entry(CLAUDE)
