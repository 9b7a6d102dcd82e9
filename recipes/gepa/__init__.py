"""The ``gepa`` recipe: GEPA's reflective, Pareto-archived evolution of a harness's text.

| module | owns |
|---|---|
| ``recipe`` | ``GepaRecipe``: its settings, the step (sessions in, the archive's best out), the checks |
| ``search`` | one GEPA run: parent, component, minibatch, mutation, acceptance, validation, budget |
| ``archive`` | the archive: members, Pareto fronts per validation session, parent draws, minibatches |
| ``mutate`` | the reflective mutation: the model rewrites one component from sessions and feedback |
| ``provenance`` | what in a rewritten component a person must see first (reefine's evidence rules) |

Owns: turning scored sessions into a harness candidate by GEPA (arXiv 2507.19457): text
components of the tree mutated one at a time by reflection, accepted on a minibatch, kept in a
Pareto archive over held-out sessions, and published only on a strict improvement on them.
Does not own: the sessions, the judge, the held-out rule, the replay judge and the release
checks (``recipes.reefine``, reused, not copied), the worker and publishing
(``reef_core.learning``).
May import: ``recipes.reefine.evidence``, ``recipes.reefine.proposer``, ``recipes.reefine.recipe``,
``recipes.reefine.reflect``, ``recipes.reefine.replay``, ``recipes.reefine.risks``,
``recipes.reefine.structured``, ``recipes.reefine.usage``, ``reef_core.errors``, ``reef_core.harness``,
``reef_core.learning``, ``reef_core.release``, ``reef_core.store``.
"""

from __future__ import annotations

from recipes.gepa.recipe import GepaRecipe

__all__ = ["GepaRecipe"]
