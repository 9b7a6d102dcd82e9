"""Rendering a harness tree into a pi 0.73.1 agent dir (``PI_CODING_AGENT_DIR``).

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
from functools import cache
from pathlib import Path
from typing import Any

from reef_core.harness.render import Target
from reef_core.harness.tree import HarnessTree, TreeError

__all__ = ["CONTEXT_WINDOW", "MAX_TOKENS", "REEF_EXTENSION", "PiRenderer", "reef_extension"]

CONTEXT_WINDOW = 128_000
MAX_TOKENS = 4096
_COMPAT = {"supportsDeveloperRole": False, "supportsReasoningEffort": False}

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


@cache
def reef_extension() -> bytes:
    """The source of reef's pi extension (``adapters/pi/reef.ts``)."""
    return Path(__file__).with_name("reef.ts").read_bytes()


def _json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


class PiRenderer:
    """Renders a harness tree into pi's agent-dir layout (see the module docstring)."""

    adapter = "pi"

    def render(self, tree: HarnessTree, target: Target) -> dict[str, bytes]:
        problems = tree.problems()
        if problems:
            raise TreeError(
                "the harness tree cannot be rendered for pi: " + "; ".join(problems), field="tree"
            )
        files: dict[str, bytes] = {"AGENTS.md": self._agents_md(tree, target).encode("utf-8")}
        for entry in tree.of_kind("skill"):
            files[f"skills/{entry.name}/SKILL.md"] = entry.content.encode("utf-8")
        for entry in tree.of_kind("command"):
            files[f"prompts/{entry.name}.md"] = entry.content.encode("utf-8")
        for entry in tree.of_kind("extension"):
            files[f"extensions/{entry.name}.ts"] = entry.content.encode("utf-8")
        files[REEF_EXTENSION] = reef_extension()  # after the tree's: reef's copy always wins
        settings: dict[str, Any] = {}
        for entry in tree.of_kind("config"):
            if entry.name == "settings":
                settings.update(json.loads(entry.content))
            else:
                files[f"config/{entry.name}.json"] = entry.content.encode("utf-8")
        # reef's keys last: the provider and model must point at reef whatever the tree says
        settings.update(
            {"defaultProvider": "reef", "defaultModel": target.model, "enableInstallTelemetry": False}
        )
        files["settings.json"] = _json(settings)
        files["models.json"] = _json(self._models(target))
        return dict(sorted(files.items()))

    def facts(self) -> str:
        return _FACTS

    @staticmethod
    def _agents_md(tree: HarnessTree, target: Target) -> str:
        release = f"release {target.release}" if target.release else "an unreleased candidate"
        parts = [
            "# Harness rules (reef)\n\n"
            f"Generated by reef for scenario `{target.scenario}`, {release}. "
            "Change these rules through reef, not here: the next install overwrites this file.\n"
        ]
        parts += [f"## {entry.name}\n\n{entry.content.strip()}\n" for entry in tree.of_kind("rule")]
        return "\n".join(parts)

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
            # env-var names: pi resolves each value from the environment, else sends it literally
            "apiKey": "REEF_API_KEY",
            "headers": {"x-reef-scenario": "REEF_SCENARIO", **target.headers},
            "compat": dict(_COMPAT),
            "models": [model],
        }
        return {"providers": {"reef": provider}}
