"""Rendering a harness tree into a Claude Code config dir (``CLAUDE_CONFIG_DIR``, 2.1.x).

| tree entry                 | Claude Code config dir                                          |
|---|---|
| ``rules/<n>.md``           | ``rules/<n>.md``: user rules, loaded into every session         |
| ``skills/<n>/SKILL.md``    | ``skills/<n>/SKILL.md`` (as is)                                 |
| ``commands/<n>.md``        | ``commands/<n>.md``: the ``/<n>`` command                       |
| ``extensions/<n>.ts``      | nothing: pi's extension API has no Claude Code form (see notes) |
| ``config/settings.json``   | merged into ``settings.json`` (hooks, permissions, ...)         |
| ``config/<other>.json``    | ``config/<other>.json``: data a hook may read                   |
| (always)                   | ``commands/{evolve,versions,feedback,good,bad}.md`` and, in     |
|                            | ``settings.json``, a ``UserPromptSubmit`` hook that answers     |
|                            | them without a model call and a ``SessionStart`` hook with the  |
|                            | update notice; the traffic switches in ``env``                  |

reef's own entries are not part of any release tree: the adapter writes them into every config
dir it renders, after the tree's, so a tree cannot replace them.  A tree's hooks run next to
reef's (Claude Code runs every matching hook).  Routing is not in this file: ``reef-claude``
passes the base URL, the token and the scenario header with ``--settings``, which beats every
settings file (a project's ``.claude/settings.json`` included), so a tree that sets them, or turns
a traffic switch back on, is refused here rather than silently overridden.

Hooks call the launcher through ``$REEF_CLAUDE_LAUNCHER`` (``reef-claude`` exports its own path),
falling back on ``reef-claude`` on PATH; in a Claude Code that reef-claude did not start they do
nothing (no daemon address), and the command files tell the model to say so.
"""

from __future__ import annotations

import json
from typing import Any

from reef_core.harness.render import Target, check_hook_groups, entry_files, refuse_owned, tree_context
from reef_core.harness.tree import HarnessTree, TreeError

__all__ = [
    "COMMANDS",
    "HOOK_TIMEOUT_S",
    "NOTICE_HOOK_TIMEOUT_S",
    "TRAFFIC_SWITCHES",
    "ClaudeCodeRenderer",
    "skipped",
]

#: the switches that keep Claude Code off every network but reef's (verified with strace, 2.1.332)
TRAFFIC_SWITCHES = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL": "1",
}
#: settings keys reef owns (routing and credentials): a tree that sets them is refused
_OWNED_KEYS = ("apiKeyHelper", "awsAuthRefresh", "awsCredentialExport", "forceLoginMethod")
_OWNED_ENV_PREFIXES = ("ANTHROPIC_", "CLAUDE_CODE_USE_", "REEF_")
HOOK_TIMEOUT_S = 60  # /versions vN install runs the installer inside the hook
NOTICE_HOOK_TIMEOUT_S = 5  # the notice's own call gives up after 2 s; this bounds the interpreter too
_LAUNCHER = '"${REEF_CLAUDE_LAUNCHER:-reef-claude}"'
#: the prompt's headings of a tree's rules and skills (:meth:`ClaudeCodeRenderer.prompt_context`)
_RULES_TITLE = "# User rules"
_SKILLS_TITLE = "The following skills are available for use with the Skill tool:\n"
#: where each kind of entry lands (config/settings.json is merged into settings.json; a pi
#: extension has no Claude Code form, :func:`skipped`)
_LAYOUT = {
    "rule": "rules/{name}.md",
    "skill": "skills/{name}/SKILL.md",
    "command": "commands/{name}.md",
    "config": "config/{name}.json",
}

#: reef's in-session commands: name -> (description, argument hint)
COMMANDS: dict[str, tuple[str, str]] = {
    "evolve": ("Ask reef to change this harness (no model call)", "<what the agent should do differently>"),
    "versions": (
        "reef releases: /versions, /versions vN (its page), /versions vN install",
        "[vN|cN [install]]",
    ),
    "feedback": ("Tell reef what was good or bad in this session (no model call)", "<text>"),
    "good": ("Tell reef this session went well (score 1, no model call)", "[why]"),
    "bad": ("Tell reef this session went badly (score 0, no model call)", "[why]"),
}

_FACTS = """\
Harness: Claude Code (@anthropic-ai/claude-code 2.1). Each entry kind, as Claude Code uses it:

- skill (skills/<name>/SKILL.md): markdown that starts with frontmatter between '---' lines holding \
`name:` (equal to <name>) and `description:`. Claude Code lists every skill's name and description to \
the model, which loads the body with its Skill tool when a task matches the description; a person can \
invoke it as /<name>. Put when-to-use in the description and the steps in the body.
- rule (rules/<name>.md): plain markdown instructions, loaded into every session as user rules, so \
they always apply: keep them short and general.
- command (commands/<name>.md): a prompt the person runs as /<name> [args]. The body is sent as the \
user message with $ARGUMENTS (all arguments) and $1, $2 (positional) substituted. Optional \
frontmatter: `description:` and `argument-hint:`.
- extension: Claude Code has none (pi's TypeScript extensions do not run in it): an extension entry \
is skipped when the tree is installed for Claude Code. Use a hook in config/settings.json instead.
- config (config/<name>.json): a JSON object. config/settings.json is merged into Claude Code's \
settings.json: "hooks" (shell commands Claude Code runs on events such as PreToolUse, PostToolUse, \
UserPromptSubmit, SessionStart, Stop; they run programs, so a change to them waits for a person's \
approval), "permissions" ({"allow": [...], "deny": [...]} tool rules such as "Bash(npm test:*)"; a \
change waits for approval too), "env" (variables for the session; approval too), \
"includeCoAuthoredBy", "cleanupPeriodDays". reef owns the model endpoint: "apiKeyHelper", \
ANTHROPIC_* and CLAUDE_CODE_USE_* variables and the traffic switches cannot be set by a tree. Any \
other config/<name>.json is installed as data at $CLAUDE_CONFIG_DIR/config/<name>.json.

Every entry: a name of 1-64 lowercase letters, digits or '-'; at most 64 KiB; names starting with \
"reef" belong to reef and cannot be created, changed or removed.
"""


def _json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def skipped(tree: HarnessTree) -> list[str]:
    """One line per entry of ``tree`` that Claude Code has no form for (pi extensions)."""
    return [
        f"extensions/{entry.name}.ts is a pi extension: Claude Code cannot run it, so it is not installed"
        for entry in tree.of_kind("extension")
    ]


def _command_file(name: str) -> bytes:
    description, hint = COMMANDS[name]
    return (
        "---\n"
        f"description: {description}\n"
        f"argument-hint: {hint}\n"
        "disable-model-invocation: true\n"
        "---\n"
        f"reef's /{name} is answered by reef's UserPromptSubmit hook, before any model call. If you are "
        "reading this, the hook did not run: this Claude Code was not started by reef-claude. Tell the "
        f"person, in one sentence, to start Claude Code with reef-claude to use /{name}; do nothing else.\n"
    ).encode()


def _reef_hooks() -> dict[str, list[dict[str, Any]]]:
    return {
        "UserPromptSubmit": [
            {"hooks": [{"type": "command", "command": f"{_LAUNCHER} hook prompt", "timeout": HOOK_TIMEOUT_S}]}
        ],
        "SessionStart": [
            {
                "matcher": "startup|resume|clear",
                "hooks": [
                    {
                        "type": "command",
                        "command": f"{_LAUNCHER} hook session-start",
                        "timeout": NOTICE_HOOK_TIMEOUT_S,
                    }
                ],
            }
        ],
    }


def _check_settings(settings: dict[str, Any]) -> None:
    owned = [key for key in _OWNED_KEYS if key in settings]
    env = settings.get("env")
    if env is not None and not isinstance(env, dict):
        raise TreeError("config/settings.json: env must be an object", field="config/settings.json")
    for key, value in (env or {}).items():
        if key.startswith(_OWNED_ENV_PREFIXES) or (key in TRAFFIC_SWITCHES and str(value) != "1"):
            owned.append(f"env.{key}")
    refuse_owned(
        owned, "config/settings.json", "Claude Code (the model endpoint, credentials and traffic switches)"
    )
    check_hook_groups(settings.get("hooks"), "config/settings.json")


class ClaudeCodeRenderer:
    """Renders a harness tree into Claude Code's config-dir layout (see the module docstring)."""

    adapter = "claude_code"

    def render(self, tree: HarnessTree, target: Target) -> dict[str, bytes]:
        files = entry_files(tree, "Claude Code", _LAYOUT)
        settings: dict[str, Any] = json.loads(files.pop("config/settings.json", b"{}"))
        _check_settings(settings)
        # reef's entries last: they always win (a tree's command of the same name is replaced)
        for name in COMMANDS:
            files[f"commands/{name}.md"] = _command_file(name)
        hooks = {event: list(groups) for event, groups in (settings.get("hooks") or {}).items()}
        for event, groups in _reef_hooks().items():
            hooks[event] = [*hooks.get(event, []), *groups]
        settings["hooks"] = hooks
        settings["env"] = {**(settings.get("env") or {}), **TRAFFIC_SWITCHES}
        settings.setdefault("includeCoAuthoredBy", False)
        files["settings.json"] = _json(settings)
        return dict(sorted(files.items()))

    def skipped(self, tree: HarnessTree) -> list[str]:
        return skipped(tree)

    def facts(self) -> str:
        return _FACTS

    def prompt_context(self, system: str, served: HarnessTree | None, tree: HarnessTree) -> str:
        # Claude Code sends its user rules inside its own system text: the served rules come out
        # wherever their text appears, the tree's rules and skill list go in after it
        text = system
        for entry in served.of_kind("rule") if served is not None else []:
            body = entry.content.strip()
            if body:
                text = text.replace(body, "")
        return tree_context(tree, before=text, rules_title=_RULES_TITLE, skills_title=_SKILLS_TITLE)
