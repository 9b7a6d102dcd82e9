"""The pi adapter: renderer for pi's agent dir, installer, ``reef-pi`` launcher, pi extension.

| module | owns |
|---|---|
| ``render``   | :class:`PiRenderer`: a tree as a pi 0.73.1 agent dir; pi's facts for the proposer |
| ``install``  | :class:`PiInstaller`: the ``curl … | sh`` script installing a release and ``reef-pi`` |
| ``launcher`` | ``reef-pi``: pi routed through reef; evolve, versions, update, report, doctor |
| ``reef.ts``  | reef's pi extension, in every rendered agent dir: /evolve, /versions, update notice |

May import: ``reef_core`` (never the other way round: reef_core finds the renderer and the
installer by dotted reference in ``reef_core.harness.render``).
"""
