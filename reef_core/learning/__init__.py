"""Learning: the recipe contract and the per-scenario worker that runs it.

Owns: what a recipe must provide (``recipe.py``), loading one by name or dotted reference
(``loader.py``), and the background worker per scenario that turns batches into candidates,
runs release checks and publishes or rejects (``worker.py``), within budgets.
Does not own: what any recipe learns (``recipes/``), the HTTP surface (``daemon``).
May import: ``reef_core.store``, ``reef_core.config``, ``reef_core.errors``.
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
