"""Rendering a harness tree into a Codex CLI home (``CODEX_HOME``, 0.171).

| tree entry                 | Codex home                                                     |
|---|---|
| ``rules/<n>.md``           | ``AGENTS.md``: a generated header, then each rule under ``## <n>`` |
| ``skills/<n>/SKILL.md``    | ``skills/<n>/SKILL.md`` (as is; the person invokes it as ``$<n>``) |
| ``commands/<n>.md``        | ``skills/<n>/SKILL.md``: Codex 0.171 has no custom prompts, so a  |
|                            | command becomes a skill the person invokes as ``$<n>``          |
| ``extensions/<n>.ts``      | nothing: pi's extension API has no Codex form                  |
| ``config/codex.json``      | merged into ``reef-config.toml`` (reef's keys win, see below)  |
| ``config/<other>.json``    | ``config/<other>.json``: data a hook may read                  |
| (always)                   | ``reef-config.toml``: the ``reef`` model provider and the      |
|                            | traffic switches; ``hooks.json``: reef's ``UserPromptSubmit``  |
|                            | hook (``:versions``, ``:good``… without a model call) and its  |
|                            | ``SessionStart`` update notice, the tree's own hooks beside them |

**Why ``reef-config.toml`` and not ``config.toml``.**  Codex writes into its ``config.toml``
while it runs (the folders a person trusted, which hooks are trusted, the notices it showed), so a
file the installer checks byte for byte cannot be that one.  ``reef-codex`` writes
``config.toml`` at every start from the installed ``reef-config.toml`` plus the tables Codex keeps
there itself (:func:`merged_config`); reef's keys always come from the release.

**Routing.**  The provider sends to ``<reef>/v1/responses`` (``wire_api = "responses"``) with the
key from ``REEF_API_KEY`` and the scenario, run and release headers from ``REEF_SCENARIO``,
``REEF_RUN_TAG`` and ``REEF_RELEASE_TAG``; Codex sends its own ``session-id`` header, which the
daemon stores as the record's session tag.  A tree key that would send the model's traffic
anywhere else, or turn a traffic switch back on, is refused when the tree is rendered, naming
the key (:data:`OWNED_KEYS`).  Keys that run programs (``mcp_servers``, ``notify``,
``shell_environment_policy``, hooks) are the tree's to set, behind a person's approval like
extension code (``reef_core.harness.tree.APPROVAL_CONFIG_KEYS``).

The TOML writer is our own (:func:`dumps`): Python reads TOML (``tomllib``) but writes none,
and what reef writes is tables, strings, numbers, booleans and lists of them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from reef_core.harness.render import (
    AgentsMdRenderer,
    Target,
    agents_md,
    check_hook_groups,
    entry_files,
    refuse_owned,
)
from reef_core.harness.tree import HarnessTree, TreeError, parse_frontmatter

__all__ = [
    "COMMANDS",
    "CONFIG_FILE",
    "OWNED_KEYS",
    "REEF_CONFIG",
    "CodexRenderer",
    "dumps",
    "merged_config",
    "skipped",
]

#: the file Codex reads, written by ``reef-codex`` at each start; the installed one it comes from
CONFIG_FILE = "config.toml"
REEF_CONFIG = "reef-config.toml"
#: keys of Codex's config.toml that route model traffic or turn reef's traffic switches off
OWNED_KEYS = (
    "analytics",
    "chatgpt_base_url",
    "check_for_update_on_startup",
    "experimental_realtime_webrtc_call_base_url",
    "experimental_realtime_ws_base_url",
    "model",
    "model_catalog_json",
    "model_provider",
    "model_providers",
    "openai_base_url",
    "oss_provider",
    "profile",
    "profiles",
)
#: features reef sets: no plugin marketplace or daemon (it would keep the first session's
#: environment), and a refused connection fails instead of being retried for ever
_FEATURES = {"daemon_auto_start": False, "plugins": False, "unbounded_connection_retries": False}
#: the tables Codex itself writes into config.toml, kept across reef-codex's rewrites
_CODEX_STATE = ("hooks", "notice", "projects", "tui")
HOOK_TIMEOUT_S = 60  # ":versions vN install" runs the installer inside the hook
NOTICE_HOOK_TIMEOUT_S = 5
_LAUNCHER = '"${REEF_CODEX_LAUNCHER:-reef-codex}"'
_SKILLS_TITLE = "Skills (invoke one with $<name>):"
_LAYOUT = {"skill": "skills/{name}/SKILL.md", "config": "config/{name}.json"}

#: reef's in-session commands (typed as ``:<name>``: Codex's TUI refuses a ``/`` it does not know)
COMMANDS = ("evolve", "versions", "feedback", "good", "bad")

_FACTS = """\
Harness: Codex CLI (@openai/codex 0.171). Each entry kind, as Codex uses it:

- skill (skills/<name>/SKILL.md): markdown that starts with frontmatter between '---' lines holding \
`name:` (equal to <name>) and `description:`. Codex lists every skill's name and description to the \
model on every request and sends the whole file when the person's prompt mentions $<name>. Put \
when-to-use in the description and the steps in the body.
- rule (rules/<name>.md): plain markdown instructions. All rules are joined into AGENTS.md, which Codex \
sends with every session, so they always apply: keep them short and general.
- command (commands/<name>.md): Codex 0.171 has no custom prompts: a command is installed as a skill of \
the same name (its frontmatter description kept), which the person invokes as $<name>.
- extension: Codex has none (pi's TypeScript extensions do not run in it): an extension entry is \
skipped when the tree is installed for Codex. Use a hook in config/codex.json instead.
- config (config/<name>.json): a JSON object. config/codex.json is merged into Codex's config.toml: \
"approval_policy", "sandbox_mode", "model_reasoning_effort", "hide_agent_reasoning", \
"mcp_servers" and "notify" (they run programs, so a change waits for a person's approval), \
"shell_environment_policy" (approval too), "hooks" (written to hooks.json; approval too). reef owns \
the model and where it is served: "model", "model_provider", "model_providers", "openai_base_url", \
"chatgpt_base_url", "profile", "analytics" and the other routing keys cannot be set by a tree. Any \
other config/<name>.json is installed as data at $CODEX_HOME/config/<name>.json.

Every entry: a name of 1-64 lowercase letters, digits or '-'; at most 64 KiB; names starting with \
"reef" belong to reef and cannot be created, changed or removed.
"""


def skipped(tree: HarnessTree) -> list[str]:
    """One line per entry of ``tree`` that Codex has no form for: pi extensions, and commands
    whose skill name a skill of the tree already has."""
    lines = [
        f"extensions/{entry.name}.ts is a pi extension: Codex cannot run it, so it is not installed"
        for entry in tree.of_kind("extension")
    ]
    skills = {entry.name for entry in tree.of_kind("skill")}
    lines += [
        f"commands/{entry.name}.md becomes a Codex skill, but skills/{entry.name} exists: it is not installed"
        for entry in tree.of_kind("command")
        if entry.name in skills
    ]
    return lines


def _command_skill(name: str, content: str) -> bytes:
    front = parse_frontmatter(content)
    body = (front.body if front else content).strip()
    description = (front.fields.get("description", "") if front else "").strip()
    description = description or f"The person's ${name} command: do what its instructions say."
    return (
        f"---\nname: {name}\ndescription: {json.dumps(description, ensure_ascii=False)}\n---\n\n"
        f"{body.replace('$ARGUMENTS', 'the text after the command')}\n"
    ).encode()


def _reef_hooks() -> dict[str, list[dict[str, Any]]]:
    def hook(verb: str, timeout: int) -> dict[str, Any]:
        return {"hooks": [{"type": "command", "command": f"{_LAUNCHER} hook {verb}", "timeout": timeout}]}

    return {
        "UserPromptSubmit": [hook("prompt", HOOK_TIMEOUT_S)],
        "SessionStart": [hook("session-start", NOTICE_HOOK_TIMEOUT_S)],
    }


def _check_config(config: dict[str, Any]) -> None:
    owned = [key for key in OWNED_KEYS if key in config]
    features = config.get("features")
    if features is not None and not isinstance(features, dict):
        raise TreeError("config/codex.json: features must be an object", field="config/codex.json")
    owned += [f"features.{key}" for key in _FEATURES if key in (features or {})]
    refuse_owned(owned, "config/codex.json", "Codex (the model, where it is served and the traffic switches)")
    check_hook_groups(config.get("hooks"), "config/codex.json")


class CodexRenderer(AgentsMdRenderer):
    """Renders a harness tree into a Codex home (see the module docstring)."""

    adapter = "codex"
    facts_text = _FACTS
    skills_title = _SKILLS_TITLE  # Codex sends AGENTS.md verbatim inside its instructions message
    skipped = staticmethod(skipped)

    def render(self, tree: HarnessTree, target: Target) -> dict[str, bytes]:
        files = entry_files(tree, "Codex", _LAYOUT)
        skills = {entry.name for entry in tree.of_kind("skill")}
        for entry in tree.of_kind("command"):
            if entry.name not in skills:
                files[f"skills/{entry.name}/SKILL.md"] = _command_skill(entry.name, entry.content)
        config: dict[str, Any] = json.loads(files.pop("config/codex.json", b"{}"))
        _check_config(config)
        hooks = {event: list(groups) for event, groups in (config.pop("hooks", None) or {}).items()}
        for event, groups in _reef_hooks().items():  # reef's last: the tree's run beside them
            hooks[event] = [*hooks.get(event, []), *groups]
        files["hooks.json"] = (json.dumps({"hooks": hooks}, indent=2, sort_keys=True) + "\n").encode()
        files["AGENTS.md"] = agents_md(tree, target).encode("utf-8")
        features = {**(config.pop("features", None) or {}), **_FEATURES}
        # reef's keys last: the model and its endpoint are reef's whatever the tree says
        files[REEF_CONFIG] = dumps(
            {
                "model": target.model,
                "model_provider": "reef",
                "check_for_update_on_startup": False,
                **config,
                "model_providers": {"reef": self._provider(target)},
                "analytics": {"enabled": False},
                "features": features,
            }
        ).encode("utf-8")
        return dict(sorted(files.items()))

    @staticmethod
    def _provider(target: Target) -> dict[str, Any]:
        from_env = {"x-reef-scenario": "REEF_SCENARIO", **target.headers}
        return {
            "name": "reef",
            "base_url": f"{target.reef_url}/v1",
            "wire_api": "responses",
            "env_key": "REEF_API_KEY",
            "env_http_headers": from_env,
            "http_headers": {"x-reef-harness": "codex"},  # a literal: the record says Codex sent it
        }


def merged_config(reef_config: str, current: Mapping[str, Any]) -> str:
    """``config.toml`` for a start: the installed ``reef_config``, then the tables Codex itself
    keeps in ``current`` (the file it last wrote, parsed): the folders it trusts, the hooks a
    person or reef trusted, its notices.  Nothing else of ``current`` survives."""
    kept = {key: current[key] for key in _CODEX_STATE if isinstance(current.get(key), dict)}
    if not kept:
        return reef_config
    return reef_config.rstrip("\n") + "\n\n" + dumps(kept)


# -- TOML ------------------------------------------------------------------------------------


def dumps(data: Mapping[str, Any]) -> str:
    """``data`` as TOML: its plain values first, then each table as ``[a.b]``."""
    lines: list[str] = []
    _table(data, (), lines)
    return "\n".join(lines).strip("\n") + "\n"


def _table(data: Mapping[str, Any], path: tuple[str, ...], lines: list[str]) -> None:
    plain = {k: v for k, v in data.items() if not isinstance(v, Mapping)}
    tables = {k: v for k, v in data.items() if isinstance(v, Mapping)}
    if path and (plain or not tables):
        lines += ["", "[" + ".".join(_key(p) for p in path) + "]"]
    lines += [f"{_key(key)} = {_value(value)}" for key, value in plain.items()]
    for key, value in tables.items():
        _table(value, (*path, key), lines)


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _string(key)


def _string(text: str) -> str:
    # a JSON string is a TOML basic string: the same escapes (\" \\ \b \f \n \r \t \uXXXX)
    return json.dumps(text, ensure_ascii=False)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TreeError(f"a TOML value cannot be {value!r}", field="config/codex.json")
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    if value is None:
        raise TreeError("TOML has no null: leave the key out instead", field="config/codex.json")
    raise TreeError(f"a TOML value cannot be {type(value).__name__}", field="config/codex.json")
