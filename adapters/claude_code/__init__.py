"""The Claude Code adapter: renderer for a ``CLAUDE_CONFIG_DIR``, installer, ``reef-claude``, hooks,
health check.

| module | owns |
|---|---|
| ``render``   | :class:`ClaudeCodeRenderer`: a tree as a Claude Code config dir; its facts for the proposer |
| ``install``  | :class:`ClaudeCodeInstaller`: the ``curl … | sh`` script: a release and ``reef-claude`` |
| ``launcher`` | ``reef-claude``: Claude Code routed through reef (``--settings``); the shared verbs |
| ``health``   | :class:`ClaudeCodeHealth`: the real claude started on a candidate's config dir, judged |

Its prompt hooks (/evolve, /versions, /good, /bad, /feedback, the update notice) are shared
with Codex: ``adapters.hooks`` and its fast path ``adapters.hook_gate``.

May import: ``reef_core`` and the cores shared with pi and Codex (``adapters.launcher``,
``adapters.verbs``, ``adapters.installer``, ``adapters.binaries``, ``adapters.health``,
``adapters.hooks``, ``adapters.hook_gate``).
"""
