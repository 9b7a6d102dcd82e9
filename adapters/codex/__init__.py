"""The Codex CLI adapter (``@openai/codex`` 0.171): the renderer, the installer, ``reef-codex`` and
the health check.

| module | owns |
|---|---|
| ``render``   | a harness tree as a ``CODEX_HOME``: AGENTS.md, skills, ``reef-config.toml``, hooks |
| ``install``  | the ``curl … | sh`` installer's Codex part |
| ``launcher`` | ``reef-codex``: config.toml written at each start, reef's hooks trusted, ``exec`` |
| ``health``   | the real ``codex exec`` on a candidate's home, routed through reef |

May import: ``reef_core`` and the cores shared with pi and Claude Code (``adapters.launcher``,
``adapters.verbs``, ``adapters.installer``, ``adapters.binaries``, ``adapters.health``,
``adapters.hooks``, ``adapters.hook_gate``).
"""
