"""Adapters: the glue between reef and one agent harness each (``pi``, ``claude_code``, ``codex``,
``opencode``).

| module | owns |
|---|---|
| ``launcher``    | the launcher core ``reef-pi`` and ``reef-claude`` share: layout, context, parsing, exec |
| ``verbs``       | the launchers' verbs: evolve, learn, versions, update, report, help |
| ``doctor``      | ``reef-pi doctor``, ``reef-claude doctor``: one line per prerequisite |
| ``binaries``    | finding a harness binary, its version, and the PATH it runs with |
| ``canary``      | which tree a new session runs: the installed release, or the canary laid out beside it |
| ``health``      | the health-check template both adapters implement: validate, find, sandbox, run, judge |
| ``installer``   | the ``curl … | sh`` installer core: one release rendered for a harness |
| ``hooks``       | in-session commands and the update notice, for harnesses with prompt hooks |
| ``hook_gate``   | the hooks' fast path: a prompt that is not reef's ends before imports |
| ``pi``          | the pi adapter |
| ``claude_code`` | the Claude Code adapter |
| ``codex``       | the Codex CLI adapter |
| ``opencode``    | the opencode adapter |

Owns: everything reef knows about one harness: its files, its binary, its launcher, its health.
Does not own: the harness tree (``reef_core.harness``), what a recipe learns (``recipes``).
reef_core and recipes reach an adapter only by dotted reference (``reef_core.harness.render``,
``reef_core.harness.health``); nothing outside ``adapters`` imports it but tests and benches.
May import: ``reef_core``, ``httpx``.
"""
