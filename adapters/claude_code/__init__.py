"""The Claude Code adapter: renderer for a ``CLAUDE_CONFIG_DIR``, installer, ``reef-claude``, hooks,
health check.

| module | owns |
|---|---|
| ``render``   | :class:`ClaudeCodeRenderer`: a tree as a Claude Code config dir; its facts for the proposer |
| ``install``  | :class:`ClaudeCodeInstaller`: the ``curl … | sh`` script: a release and ``reef-claude`` |
| ``launcher`` | ``reef-claude``: Claude Code routed through reef (``--settings``); the shared verbs |
| ``hooks``    | ``reef-claude hook …``: /evolve, /versions, /good, /bad, /feedback, the update notice |
| ``gate``     | the prompt hook's early exit: a prompt that is no reef command costs one Python start |
| ``health``   | :class:`ClaudeCodeHealth`: the real claude started on a candidate's config dir, judged |

May import: ``reef_core`` and the cores shared with pi (``adapters.launcher``, ``adapters.verbs``,
``adapters.installer``, ``adapters.binaries``, ``adapters.health``).
"""
