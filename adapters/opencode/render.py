"""Rendering a harness tree into an opencode config dir (``OPENCODE_CONFIG_DIR``, 1.18).

| tree entry                 | opencode config dir                                            |
|---|---|
| ``rules/<n>.md``           | ``AGENTS.md``: a generated header, then each rule under ``## <n>`` |
| ``skills/<n>/SKILL.md``    | ``skills/<n>/SKILL.md`` (as is; loaded by the model's skill tool) |
| ``commands/<n>.md``        | ``commands/<n>.md``: the ``/<n>`` command (``$ARGUMENTS`` as is) |
| ``extensions/<n>.ts``      | nothing: pi's extension API has no opencode form               |
| ``config/opencode.json``   | merged into ``opencode.json`` (reef's keys win, see below)     |
| ``config/<other>.json``    | ``config/<other>.json``: data a plugin may read                |
| (always)                   | ``opencode.json`` with the ``reef`` provider; ``plugins/reef.js``, |
|                            | reef's plugin (``/versions``, ``/good``… without a model call, |
|                            | the update notice); ``commands/{evolve,versions,feedback,good,bad}.md`` |
|                            | (a command must exist for ``/good`` to be typed); npm stubs    |

**Routing.**  The ``reef`` provider is opencode's bundled ``@ai-sdk/openai-compatible`` at
``<reef>/v1``, with the key and the scenario, run and release headers read from the environment by
opencode's own ``{env:NAME}`` substitution (``REEF_API_KEY``, ``REEF_SCENARIO``, ``REEF_RUN_TAG``,
``REEF_RELEASE_TAG``, which ``reef-opencode`` exports) and the literal ``x-reef-harness: opencode``.
opencode sends its session id as ``x-session-id`` on every request (for a provider whose id does
not start with ``opencode``), which the daemon stores as the record's session tag.
``enabled_providers`` is ``["reef"]``, so a provider key in the environment (``OPENAI_API_KEY``)
or a project's config cannot turn another provider on.  opencode merges configs per key and the
config dir's file is read last, so reef's keys beat a person's and a project's.  A tree key that
would send the model's traffic elsewhere, or fetch from the network (:data:`OWNED_KEYS`, and any
agent's or command's ``model``), is refused when the tree is rendered, naming the key; keys that
run programs (``plugin``, ``mcp``, ``lsp``, ``formatter``, ``permission``, ``tools``,
``experimental``) wait for a person (``reef_core.harness.tree.APPROVAL_CONFIG_KEYS``).

**The npm stubs.**  opencode 1.18 runs ``npm install @opencode-ai/plugin`` in every config dir
unless ``node_modules/`` exists and ``package-lock.json`` lists every dependency of
``package.json`` (found in its bundled code and confirmed with strace: with the stubs a run made
only loopback connections).  reef's plugin imports nothing, so the stubs are all it needs.
"""

from __future__ import annotations

import json
import re
from typing import Any

from reef_core.harness.render import AgentsMdRenderer, Target, agents_md, entry_files, refuse_owned
from reef_core.harness.tree import HarnessTree, TreeError

__all__ = [
    "COMMANDS",
    "CONFIG_FILE",
    "OPENCODE_VERSION",
    "OWNED_KEYS",
    "PLUGIN_FILE",
    "OpencodeRenderer",
    "skipped",
]

#: the opencode the plugin API and the npm stubs were verified with
OPENCODE_VERSION = "1.18.33"
CONFIG_FILE = "opencode.json"
PLUGIN_FILE = "plugins/reef.js"
#: keys of opencode.json a tree may not set: the model and where it is served, what reaches
#: the network (shares, updates, remote instructions and references), the server
OWNED_KEYS = (
    "autoshare",
    "autoupdate",
    "disabled_providers",
    "enabled_providers",
    "enterprise",
    "instructions",
    "mode",
    "model",
    "provider",
    "reference",
    "references",
    "server",
    "share",
    "small_model",
)
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
_SUBSTITUTION = re.compile(r"\{(env|file):", re.IGNORECASE)
_SKILLS_TITLE = "Skills (loaded with the skill tool):"
_LAYOUT = {
    "skill": "skills/{name}/SKILL.md",
    "command": "commands/{name}.md",
    "config": "config/{name}.json",
}

#: reef's in-session commands: name -> description (what opencode's ``/`` menu shows)
COMMANDS: dict[str, str] = {
    "evolve": "reef: ask reef to change this harness (no model call)",
    "versions": "reef: releases; /versions vN shows its page, /versions vN install installs it",
    "feedback": "reef: tell reef what was good or bad in this session (no model call)",
    "good": "reef: this session went well (score 1, no model call)",
    "bad": "reef: this session went badly (score 0, no model call)",
}

_FACTS = f"""\
Harness: opencode (opencode-ai {OPENCODE_VERSION}). Each entry kind, as opencode uses it:

- skill (skills/<name>/SKILL.md): markdown that starts with frontmatter between '---' lines holding \
`name:` (equal to <name>) and `description:`. opencode lists every skill's name and description to \
the model, which loads the body with its skill tool when a task matches the description. Put \
when-to-use in the description and the steps in the body.
- rule (rules/<name>.md): plain markdown instructions. All rules are joined into the AGENTS.md \
opencode sends with every session, so they always apply: keep them short and general.
- command (commands/<name>.md): a prompt the person runs as /<name> [args]. The body is sent as the \
user message with $ARGUMENTS (all arguments) and $1, $2 (positional) substituted. Optional \
frontmatter: `description:`, `agent:`, `subtask:`.
- extension: opencode has none of pi's kind (pi's TypeScript extensions do not run in it): an \
extension entry is skipped when the tree is installed for opencode.
- config (config/<name>.json): a JSON object. config/opencode.json is merged into opencode's \
opencode.json: "agent" (agents with their prompt, tools and permissions, but no "model"), \
"command" (commands, no "model"), "keybinds", "theme", "watcher", "snapshot"; "permission", "tools", \
"plugin", "mcp", "lsp", "formatter" and "experimental" run programs or let the model run them \
unasked, so a change waits for a person's approval. reef owns the model and where it is served: \
"provider", "model", "small_model", "enabled_providers", "disabled_providers", "share", "autoupdate", \
"instructions", "references" and "server" cannot be set by a tree. Any other config/<name>.json is \
installed as data at $OPENCODE_CONFIG_DIR/config/<name>.json.

Every entry: a name of 1-64 lowercase letters, digits or '-'; at most 64 KiB; names starting with \
"reef" belong to reef and cannot be created, changed or removed.
"""

#: reef's plugin: in-session commands through ``reef-opencode hook prompt`` (the event as JSON on
#: stdin, as Claude Code and Codex send it), answered in the TUI with a toast (the model never
#: sees it) and ended with a throw, which opencode takes as "no model call"; the update
#: notice through ``reef-opencode hook session-start`` when a session is created; opencode's
#: title and summary requests tagged ``aside`` (``reef_core.sessions.ASIDE_TAG``).  Bun runs it
#: (opencode is a Bun binary); it imports nothing.
_PLUGIN = """\
// reef's opencode plugin, written by reef's installer: the next install overwrites it.
const COMMANDS = new Set(@@COMMANDS@@);
const LAUNCHER = process.env.REEF_OPENCODE_LAUNCHER || "reef-opencode";

async function hook(which, event) {
  try {
    const child = Bun.spawn([LAUNCHER, "hook", which], {
      stdin: new Blob([JSON.stringify(event)]),
      stdout: "pipe",
      stderr: "ignore",
      env: process.env,
    });
    const said = await new Response(child.stdout).text();
    await child.exited;
    return said.trim() ? JSON.parse(said) : {};
  } catch (error) {
    return { reason: `reef: ${LAUNCHER} hook ${which} failed: ${error}` };
  }
}

async function show(client, text, variant) {
  // a toast: the TUI shows it over the session, and the model never sees it; the update notice
  // (a warning) comes while the person starts typing, so it stays longer
  const least = variant === "warning" ? 15000 : 8000;
  const duration = Math.min(30000, Math.max(least, 40 * text.length));
  try {
    await client.tui.showToast({ body: { message: text, variant, duration } });
  } catch {}
}

// opencode's own errands beside the session, asked of the same model: the record's aside tag
const ASIDES = new Set(["title", "summary"]);

export const ReefPlugin = async ({ client }) => {
  const noticed = new Set();
  return {
    "chat.headers": async (input, output) => {
      const agent = typeof input.agent === "string" ? input.agent : input.agent && input.agent.name;
      if (ASIDES.has(agent)) output.headers["x-reef-tag-aside"] = agent;
    },
    "command.execute.before": async (input) => {
      if (!COMMANDS.has(input.command)) return;
      // `opencode run --command X words` quotes the words; the TUI passes them as typed
      const words = (input.arguments || "").trim().replace(/^"(.*)"$/s, "$1");
      const event = { prompt: `/${input.command} ${words}`.trim(), session_id: input.sessionID };
      try {
        const created = (await client.session.get({ path: { id: input.sessionID } })).data.time.created;
        if (Number.isInteger(created)) event.session_started_ms = created; // a resumed session's start
      } catch {}
      const answer = await hook("prompt", event);
      await show(client, answer.reason || `reef: /${input.command} gave no answer`, "info");
      throw new Error(`reef answered /${input.command} without a model call`);
    },
    event: async ({ event }) => {
      if (event.type !== "session.created") return;
      const id = event.properties && event.properties.info && event.properties.info.id;
      if (!id || noticed.has(id)) return;
      noticed.add(id);
      const said = await hook("session-start", { session_id: id });
      if (said.systemMessage) await show(client, said.systemMessage, "warning");
    },
  };
};
"""

#: opencode installs ``@opencode-ai/plugin`` in a config dir unless these say it is there
_PLUGIN_PACKAGE = {"@opencode-ai/plugin": OPENCODE_VERSION}
NPM_STUBS: dict[str, bytes] = {
    "package.json": (json.dumps({"dependencies": _PLUGIN_PACKAGE}, indent=2) + "\n").encode(),
    "package-lock.json": (
        json.dumps({"lockfileVersion": 3, "packages": {"": {"dependencies": _PLUGIN_PACKAGE}}}, indent=2)
        + "\n"
    ).encode(),
    "node_modules/.reef": b"opencode finds its plugin package here: reef's plugin imports nothing\n",
}


def _json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def skipped(tree: HarnessTree) -> list[str]:
    """One line per entry of ``tree`` that opencode has no form for (pi extensions), and each
    command that one of reef's replaces."""
    lines = [
        f"extensions/{entry.name}.ts is a pi extension: opencode cannot run it, so it is not installed"
        for entry in tree.of_kind("extension")
    ]
    lines += [
        f"commands/{entry.name}.md is replaced by reef's own /{entry.name}"
        for entry in tree.of_kind("command")
        if entry.name in COMMANDS
    ]
    return lines


def _command_file(name: str) -> bytes:
    return (
        f"---\ndescription: {json.dumps(COMMANDS[name])}\n---\n"
        f"reef's /{name} is answered by reef's opencode plugin, before any model call. If you are "
        "reading this, the plugin did not run: this opencode was not started by reef-opencode. Tell "
        f"the person, in one sentence, to start opencode with reef-opencode to use /{name}; do "
        "nothing else.\n"
    ).encode()


def _check_config(text: str, config: dict[str, Any]) -> None:
    # opencode replaces {env:NAME} and {file:path} in the file's text when it loads it: a tree
    # could put a secret of the machine into a prompt that goes to the model and its records
    if _SUBSTITUTION.search(text):
        raise TreeError(
            "config/opencode.json uses {env:...} or {file:...}, which opencode replaces with a variable "
            "or a file of this machine: write the value itself",
            field="config/opencode.json",
        )
    owned = [key for key in OWNED_KEYS if key in config]
    for table in ("agent", "command"):
        entries = config.get(table)
        if entries is None:
            continue
        if not isinstance(entries, dict) or not all(isinstance(v, dict) for v in entries.values()):
            raise TreeError(
                f"config/opencode.json: {table} must map names to objects", field="config/opencode.json"
            )
        owned += [f"{table}.{name}.model" for name, value in entries.items() if "model" in value]
    refuse_owned(
        owned, "config/opencode.json", "opencode (the model, where it is served and what reaches the network)"
    )


class OpencodeRenderer(AgentsMdRenderer):
    """Renders a harness tree into an opencode config dir (see the module docstring)."""

    adapter = "opencode"
    facts_text = _FACTS
    # opencode copies AGENTS.md verbatim into its system prompt, after "Instructions from: <path>"
    skills_title = _SKILLS_TITLE
    skipped = staticmethod(skipped)

    def render(self, tree: HarnessTree, target: Target) -> dict[str, bytes]:
        files = entry_files(tree, "opencode", _LAYOUT)
        text = files.pop("config/opencode.json", b"{}").decode("utf-8")
        config: dict[str, Any] = json.loads(text)
        _check_config(text, config)
        files["AGENTS.md"] = agents_md(tree, target).encode("utf-8")
        # reef's entries last: they always win (a tree's command of the same name is replaced)
        for name in COMMANDS:
            files[f"commands/{name}.md"] = _command_file(name)
        files[PLUGIN_FILE] = _PLUGIN.replace("@@COMMANDS@@", json.dumps(list(COMMANDS))).encode()
        files.update(NPM_STUBS)
        model = f"reef/{target.model}"
        files[CONFIG_FILE] = _json(
            {
                "$schema": "https://opencode.ai/config.json",
                **config,
                "model": model,
                "small_model": model,  # titles and summaries: else opencode may pick another provider
                "enabled_providers": ["reef"],
                "provider": {"reef": self._provider(target)},
                "autoupdate": False,
                "share": "disabled",
            }
        )
        return dict(sorted(files.items()))

    @staticmethod
    def _provider(target: Target) -> dict[str, Any]:
        headers = {"x-reef-scenario": "REEF_SCENARIO", **target.headers}
        return {
            "npm": "@ai-sdk/openai-compatible",
            "name": "reef",
            "options": {
                "baseURL": f"{target.reef_url}/v1",
                "apiKey": "{env:REEF_API_KEY}",
                "headers": {
                    **{name: _from_env(value) for name, value in headers.items()},
                    "x-reef-harness": "opencode",  # a literal: the record says opencode sent it
                },
            },
            "models": {target.model: {"name": f"{target.model} (reef)"}},
        }


def _from_env(value: str) -> str:
    """An opencode.json value read from the environment variable ``value`` when it names one
    (opencode substitutes ``{env:NAME}`` when it loads the file); a literal stays as it is."""
    return f"{{env:{value}}}" if _ENV_NAME.fullmatch(value) else value
