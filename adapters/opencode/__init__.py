"""The opencode adapter (``opencode-ai`` 1.18): the renderer, the installer, ``reef-opencode`` and
the health check.

| module | owns |
|---|---|
| ``render``   | a tree as an ``OPENCODE_CONFIG_DIR``: AGENTS.md, skills, commands, config, plugin |
| ``install``  | the ``curl … | sh`` installer's opencode part |
| ``launcher`` | ``reef-opencode``: the key and traffic switches, then ``exec`` |
| ``health``   | the real ``opencode run`` on a candidate's config dir, routed through reef |

May import: ``reef_core`` and the cores shared with the other adapters (``adapters.launcher``,
``adapters.verbs``, ``adapters.installer``, ``adapters.binaries``, ``adapters.health``,
``adapters.hooks``).
"""
