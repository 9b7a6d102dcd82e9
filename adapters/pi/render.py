"""Rendering a harness tree into a pi agent dir (``PI_CODING_AGENT_DIR``), read alike by pi 0.73.1 and 1.x.

| tree entry                 | pi agent dir                                  |
|---|---|
| ``rules/<n>.md``           | ``AGENTS.md``: a generated header, then each rule under ``## <n>`` |
| ``skills/<n>/SKILL.md``    | ``skills/<n>/SKILL.md`` (as is)               |
| ``commands/<n>.md``        | ``prompts/<n>.md``: the ``/<n>`` prompt template |
| ``extensions/<n>.ts``      | ``extensions/<n>.ts`` (as is)                 |
| ``config/settings.json``   | merged into ``settings.json`` (reef's own keys win) |
| ``config/<other>.json``    | ``config/<other>.json``: data an extension may read; pi itself ignores it |
| (always)                   | ``settings.json`` and ``models.json``: the ``reef`` provider |
| (always)                   | ``extensions/reef.ts``: reef's extension: ``/evolve``, ``/versions``, notices |

Only ``config/settings.json`` reaches pi's settings: pi reads no other JSON from its agent dir
that a tree should write (``models.json`` and ``auth.json`` are reef's and the user's), so any
other config entry stays in a ``config/`` folder of its own where it cannot shadow them.

reef's extension is not part of any release tree: the adapter ships it, so every rendered agent
dir (installed ones, and the candidates reefine's health check starts) carries the same copy,
and a tree's own ``extensions/reef.ts`` (a reserved name) never replaces it.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from reef_core.harness.render import AgentsMdRenderer, Target, agents_md, entry_files
from reef_core.harness.tree import HarnessTree

__all__ = ["CONTEXT_WINDOW", "MAX_TOKENS", "REEF_EXTENSION", "PiRenderer", "reef_extension"]

CONTEXT_WINDOW = 128_000
MAX_TOKENS = 4096
_COMPAT = {"supportsDeveloperRole": False, "supportsReasoningEffort": False}
#: a models.json value that names an environment variable (else it is a literal)
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")

_FACTS = """\
Harness: pi (pi-coding-agent 0.73.1). Each entry kind, as pi uses it:

- skill (skills/<name>/SKILL.md): markdown that starts with frontmatter between '---' lines holding \
`name:` (equal to <name>) and `description:` (required, at most 1024 characters; pi skips a skill \
without one). pi lists every skill's name and description in the system prompt; the model reads the \
full file only when a task matches the description, and a person can invoke it as /skill:<name>. \
Put when-to-use in the description and the step-by-step instructions in the body.
- rule (rules/<name>.md): plain markdown instructions. All rules are joined into AGENTS.md, which pi \
puts in the system prompt of every session, so they always apply: keep them short and general.
- command (commands/<name>.md): a prompt template the person runs as /<name> [args]. The body is sent \
as the user message with $1, $2 (positional arguments), $@ or $ARGUMENTS (all arguments) and \
${@:N} (arguments from the Nth on) substituted. Optional frontmatter: `description:` (shown in the \
command list) and `argument-hint:`.
- extension (extensions/<name>.ts): TypeScript loaded by pi at startup, no build step; it must \
`export default function (pi: ExtensionAPI) { ... }` (import the type with \
`import type { ExtensionAPI } from "@mariozechner/pi-coding-agent"`). It can register slash \
commands (pi.registerCommand(name, {description, handler: async (args, ctx) => ...}); they run \
without a model call), react to events (pi.on("session_start" | "input" | "before_agent_start" | \
"tool_call" | "tool_result" | "agent_end" | ..., handler); a tool_call handler can block a call), \
register tools the model can call (pi.registerTool), run programs (pi.exec) and send messages \
(pi.sendUserMessage). ctx.ui.notify works only when ctx.hasUI is true. Extensions run code on the \
person's machine, so a release that adds, changes or removes one waits for a person's approval \
before it is served: prefer skills, rules and commands when they can do the job.
- config (config/<name>.json): a JSON object. config/settings.json is merged into pi's settings.json, \
e.g. "defaultThinkingLevel", "quietStartup", "retry", "compaction", "enableSkillCommands", \
"shellCommandPrefix" (changing that one, or "shellPath", "npmCommand", "externalEditor" or \
"httpProxy", needs a person's approval). reef owns "defaultProvider", "defaultModel", "packages", \
"extensions", "skills", "prompts" and "providers"; a tree that sets them is refused. Any other \
config/<name>.json is installed as data at $PI_CODING_AGENT_DIR/config/<name>.json for an \
extension to read; pi itself ignores it.

Every entry: a name of 1-64 lowercase letters, digits or '-'; at most 64 KiB; names starting with \
"reef" belong to reef and cannot be created, changed or removed.
"""


#: where reef's own extension lands in every rendered agent dir
REEF_EXTENSION = "extensions/reef.ts"
#: the prompt's heading of a tree's skills (:meth:`PiRenderer.prompt_context`)
_SKILLS_TITLE = "Skills (read skills/<name>/SKILL.md when one applies):"
#: where each kind of entry lands (config/settings.json is merged into settings.json)
_LAYOUT = {
    "skill": "skills/{name}/SKILL.md",
    "command": "prompts/{name}.md",
    "extension": "extensions/{name}.ts",
    "config": "config/{name}.json",
}


@cache
def reef_extension() -> bytes:
    """The source of reef's pi extension (``adapters/pi/reef.ts``)."""
    return Path(__file__).with_name("reef.ts").read_bytes()


def _json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


class PiRenderer(AgentsMdRenderer):
    """Renders a harness tree into pi's agent-dir layout (see the module docstring)."""

    adapter = "pi"
    facts_text = _FACTS
    skills_title = _SKILLS_TITLE  # pi copies AGENTS.md into its system prompt verbatim

    def render(self, tree: HarnessTree, target: Target) -> dict[str, bytes]:
        files = entry_files(tree, "pi", _LAYOUT)
        files["AGENTS.md"] = agents_md(tree, target).encode("utf-8")
        files[REEF_EXTENSION] = reef_extension()  # after the tree's: reef's copy always wins
        settings: dict[str, Any] = json.loads(files.pop("config/settings.json", b"{}"))
        # reef's keys last: the provider and model must point at reef whatever the tree says
        settings.update(
            {"defaultProvider": "reef", "defaultModel": target.model, "enableInstallTelemetry": False}
        )
        files["settings.json"] = _json(settings)
        files["models.json"] = _json(self._models(target))
        return dict(sorted(files.items()))

    @staticmethod
    def _models(target: Target) -> dict[str, Any]:
        openai = target.api == "openai"
        # compat sits on the provider (what 0.73.1 was verified with) and on the model (where
        # pi's models.json schema declares it), so either reading of the file disables both
        model = {
            "compat": dict(_COMPAT),
            "contextWindow": CONTEXT_WINDOW,
            "id": target.model,
            "maxTokens": MAX_TOKENS,
            "name": f"{target.model} (reef)",
        }
        provider = {
            "api": "openai-completions" if openai else "anthropic-messages",
            # pi appends /chat/completions to an OpenAI baseUrl, /v1/messages to an Anthropic one
            "baseUrl": f"{target.reef_url}/v1" if openai else target.reef_url,
            "apiKey": _from_env("REEF_API_KEY"),
            "headers": {
                **{
                    name: _from_env(value)
                    for name, value in {"x-reef-scenario": "REEF_SCENARIO", **target.headers}.items()
                },
                "x-reef-harness": "pi",  # a literal: the record says pi sent it (replay renders it so)
            },
            "compat": dict(_COMPAT),
            "models": [model],
        }
        return {"providers": {"reef": provider}}


def _from_env(value: str) -> str:
    """A models.json value that every supported pi reads from the environment variable ``value``
    (a literal stays as it is).  pi up to 0.76 resolves a bare name from the environment; pi 0.77
    and newer take it literally and want ``$NAME``, which older pis send literally.  Both run a
    value that starts with ``!`` as a shell command and use what it prints: ``!printenv NAME``
    (an unset variable then fails the request instead of sending the variable's name)."""
    return f"!printenv {value}" if _ENV_NAME.fullmatch(value) else value
