"""The deployment's recipe, and one learning worker per open scenario."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from reef_core.learning import Budgets, LearningWorker, RecipeContext, load_recipe
from reef_core.learning.canary import CanaryWatch, plan_from_config
from reef_core.learning.recipe import BasicRecipe, Recipe
from reef_core.learning.worker import StepOutcome
from reef_core.store import Release, Scenario

__all__ = ["Learners"]

log = logging.getLogger(__name__)


class Learners:
    def __init__(self, recipe: type[Recipe], context: RecipeContext) -> None:
        self.recipe = recipe
        self.context = context
        self.budgets = Budgets.from_config(context.config)
        recipe.check_config(context.config)  # a bad setting stops the start, naming it
        plan_from_config(context.config)
        self.workers: dict[str, LearningWorker] = {}
        #: told of every settled step (``/metrics``): the scenario's name, and the outcome
        self.on_outcome: Callable[[str, StepOutcome], None] | None = None
        self.tickets: dict[str, set[str]] = {}  # learn tickets handed out, per scenario

    @classmethod
    def from_settings(cls, name: str, implementation: str | None, context: RecipeContext) -> Learners:
        return cls(load_recipe(name, implementation), context)

    @property
    def learns(self) -> bool:
        return self.recipe is not BasicRecipe

    def attach(self, scenario: Scenario) -> None:
        if scenario.name in self.workers or not self.learns:
            return
        told = self.on_outcome
        name = scenario.name
        worker = LearningWorker(
            scenario,
            self.recipe(self.context),
            self.budgets,
            on_outcome=None if told is None else lambda outcome: told(name, outcome),
        )
        self.workers[scenario.name] = worker.start()

    def notify(self, name: str) -> None:
        worker = self.workers.get(name)
        if worker is not None:
            worker.notify()

    def deliver(self, name: str, release: Release) -> None:
        worker = self.workers.get(name)
        if worker is not None:
            worker.deliver(release)

    def canary(self, name: str) -> CanaryWatch | None:
        """``name``'s canary (running or ended), once its worker started; None without one."""
        worker = self.workers.get(name)
        return None if worker is None else worker.canary

    def learn_now(self, name: str) -> str:
        """A learning step now on ``name``'s worker (a usage step, for reefine); its ticket."""
        worker = self.workers.get(name)
        if worker is None:
            return self.recipe.learn_now(self.recipe(self.context))  # says why it cannot
        ticket = worker.recipe.learn_now()
        self.tickets.setdefault(name, set()).add(ticket)
        return ticket

    def knows_ticket(self, name: str, ticket: str) -> bool:
        return ticket in self.tickets.get(name, set())

    def progress(self, name: str, item_id: str) -> dict[str, Any] | None:
        """What this process's worker knows of an item it took (None: not taken since start)."""
        worker = self.workers.get(name)
        return None if worker is None else worker.progress.get(item_id)

    def rebase(self, name: str, record: dict[str, Any], new_base: Release) -> str | None:
        """A stored candidate's tree rebuilt on ``new_base`` by the scenario's recipe, if it can."""
        worker = self.workers.get(name)
        if worker is None:
            return None
        return worker.recipe.rebase(worker.scenario, record, new_base)

    def describe(self, name: str) -> dict[str, Any] | None:
        worker = self.workers.get(name)
        if worker is None:
            return None
        last = worker.outcomes[-1] if worker.outcomes else None
        stats = getattr(worker.recipe, "stats", None)
        return {
            "state": worker.state,
            "steps": worker.steps,
            "selected": sum(1 for o in worker.outcomes if o.verdict == "selected"),
            "step_seconds": _median([o.seconds for o in worker.outcomes]),
            "last_step": None
            if last is None
            else {"step": last.step, "verdict": last.verdict, "seconds": round(last.seconds, 3)},
            "recipe": _summarise(stats) if isinstance(stats, dict) else None,
        }

    def can_detach(self, name: str, quiet_s: float) -> bool:
        """Whether ``name``'s worker may be stopped now, with its scenario: none runs, or its
        recipe keeps nothing in memory and it has been idle for ``quiet_s``."""
        worker = self.workers.get(name)
        if worker is None:
            return True
        if worker.canary is not None and worker.canary.running is not None:
            return False  # a canary is served from memory and decided by this worker
        return worker.recipe.detachable and worker.state == "idle" and worker.idle_for() >= quiet_s

    def detach(self, name: str) -> None:
        worker = self.workers.pop(name, None)
        if worker is not None:
            worker.stop()

    def stop(self) -> None:
        for name in list(self.workers):
            self.detach(name)


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[len(ordered) // 2], 4)


def _summarise(stats: dict[str, Any]) -> dict[str, Any]:
    """Lists of timings become their median and count; everything else passes through."""
    out: dict[str, Any] = {}
    for key, value in stats.items():
        if isinstance(value, list):
            out[f"{key}_median"] = _median(value)
            out[f"{key}_count"] = len(value)
        else:
            out[key] = value
    return out
