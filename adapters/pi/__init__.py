"""The pi adapter: renderer for pi's agent dir, installer, ``reef-pi`` launcher, pi extension.

| module   | owns |
|---|---|
| ``render`` | :class:`PiRenderer`: a harness tree as a pi 0.73.1 agent dir, and pi's facts for the proposer |

May import: ``reef_core`` (never the other way round: reef_core finds the renderer by dotted
reference in ``reef_core.harness.render.ADAPTERS``).
"""
