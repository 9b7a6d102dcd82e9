"""Learning: the recipe contract and the per-scenario worker that runs it.

| module | owns |
|---|---|
| ``recipe`` | what a recipe must provide: batches, candidates, checks, the context it gets |
| ``loader`` | finding a recipe by name (``basic``, ``grpo``, ``reefine``) or ``package.module:Class`` |
| ``worker`` | one background worker per scenario: batch → candidate → checks → release, within budgets |
| ``model``  | how a recipe talks to the served model: one synchronous call, unrecorded |
| ``canary`` | canary releases: arms, sticky assignment, the sessions' tally, promote and retire |

Does not own: what any recipe learns (``recipes/``), the HTTP surface (``daemon``).
May import: ``reef_core.store``, ``reef_core.config``, ``reef_core.errors``, ``reef_core.sessions``
(what a session is), ``reef_core.release`` (the canary's sequential test),
``reef_core.memory`` (a step's peak).
"""

from reef_core.learning.loader import load_recipe
from reef_core.learning.recipe import Batch, Candidate, CheckResult, Recipe, RecipeContext
from reef_core.learning.worker import Budgets, LearningWorker, StepOutcome

__all__ = [
    "Batch",
    "Budgets",
    "Candidate",
    "CheckResult",
    "LearningWorker",
    "Recipe",
    "RecipeContext",
    "StepOutcome",
    "load_recipe",
]
