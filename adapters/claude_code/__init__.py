"""The Claude Code adapter: renderer for a ``CLAUDE_CONFIG_DIR``, installer, ``reef-claude``, hooks.

| module | owns |
|---|---|
| ``render``   | :class:`ClaudeCodeRenderer`: a tree as a Claude Code config dir; its facts for the proposer |
| ``install``  | :class:`ClaudeCodeInstaller`: the ``curl … | sh`` script: a release and ``reef-claude`` |
| ``launcher`` | ``reef-claude``: Claude Code routed through reef (``--settings``); the shared verbs |
| ``hooks``    | ``reef-claude hook …``: /evolve, /versions, /good, /bad, /feedback, the update notice |

May import: ``reef_core`` and ``adapters.launcher``/``adapters.installer`` (the cores shared with pi).
"""
