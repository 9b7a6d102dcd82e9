"""The pi adapter: renderer for pi's agent dir, installer, ``reef-pi`` launcher, health check, pi extension.

| module | owns |
|---|---|
| ``render``   | :class:`PiRenderer`: a tree as a pi 0.73.1 agent dir; pi's facts for the proposer |
| ``install``  | :class:`PiInstaller`: the ``curl … | sh`` script installing a release and ``reef-pi`` |
| ``launcher`` | ``reef-pi``: pi routed through reef; evolve, versions, update, report, doctor |
| ``health``   | :class:`PiHealth`: the real pi started on a candidate's agent files, judged |
| ``reef.ts``  | reef's pi extension, in every rendered agent dir: /evolve, /versions, update notice |

May import: ``reef_core`` and the cores shared with Claude Code (``adapters.launcher``,
``adapters.installer``, ``adapters.binaries``, ``adapters.health``); never the other way round:
reef_core finds the renderer, the installer and the health check by dotted reference in
``reef_core.harness``.
"""
