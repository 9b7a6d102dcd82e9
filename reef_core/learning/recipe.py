"""The recipe contract.

A recipe is one learning method.  The worker asks it, over and over:

1. :meth:`Recipe.next_batch` — is there enough new material (records, reports, asks) for a
   step?  ``None`` means "not yet";
2. :meth:`Recipe.propose` — make one candidate from that batch (a tree for the release chain,
   plus what the step did);
3. :meth:`Recipe.checks` — the release checks; all must pass, and any exception rejects;
4. :meth:`Recipe.deliver` — a release was published (by this step, a rollback or a promote):
   make it what is served, without a restart;
5. :meth:`Recipe.rebase` — the chain moved while a candidate was made or waited (another
   step, a rollback): rebuild it on the new tip, or say it cannot be.

Recipes never move refs themselves: publishing, candidates and verdicts belong to the worker,
so every recipe gets the same audit trail.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from reef_core.errors import InvalidInput
from reef_core.learning.model import ModelCaller
from reef_core.store import Release, Scenario

__all__ = ["Batch", "Candidate", "CheckResult", "Recipe", "RecipeContext"]


@dataclass(frozen=True)
class Batch:
    """What one step learns from: the items it consumed, and the recipe's own payload."""

    item_ids: tuple[str, ...]
    payload: Any = None
    summary: str = ""


@dataclass(frozen=True)
class Candidate:
    """One proposed update: a tree to publish, and the step's account of itself."""

    tree: str  # oid of the release tree
    operation: str  # "training", "evolve", …
    ask: str | None = None
    record: dict[str, Any] = field(default_factory=dict)
    payload: Any = None  # recipe-private (e.g. the trained weights), never stored
    needs_approval: bool = False  # publish as pending: a person must promote it


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool
    detail: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    #: what the check wants kept with the step (reefine's replay table), stored in its record
    data: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0  # how long it ran (the worker times it)


@dataclass
class RecipeContext:
    """What the daemon lends a recipe: where to cache things, the serving engine, the model."""

    cache_dir: Path
    engine: Any = None  # the local engine when one serves, else None
    config: dict[str, Any] = field(default_factory=dict)
    log: Callable[[str], None] = print
    model: ModelCaller | None = None  # the served model, called unrecorded
    served_model: str = "default"  # the model name a harness asks reef for
    daemon_url: str | None = None  # where harnesses reach this daemon (known once it listens)
    token: str | None = None  # a token the daemon accepts, for harness checks routed through it
    proposer_sandbox: str | None = None  # REEF_PROPOSER_SANDBOX: how an agent proposer may run


class Recipe(ABC):
    """Base class of every recipe; subclasses set :attr:`name`."""

    name: ClassVar[str] = "recipe"
    #: which data items the recipe learns from ("record", "report", "ask"); the daemon refuses
    #: asks when the serving recipe does not take them
    consumes: ClassVar[frozenset[str]] = frozenset()
    #: the recipe calls the served model, so the daemon must have an upstream endpoint
    needs_model_endpoint: ClassVar[bool] = False
    #: the daemon may stop an idle worker and close its scenario (to bound what idle scenarios
    #: hold), starting a new worker when the scenario is used again: everything the recipe
    #: needs to go on is in the repository, not in the worker's memory
    detachable: ClassVar[bool] = True

    def __init__(self, context: RecipeContext) -> None:
        self.context = context

    def attach(self, scenario: Scenario) -> None:  # noqa: B027 - optional hook
        """A scenario was opened: set up what the recipe needs (e.g. a first release)."""

    @abstractmethod
    def next_batch(self, scenario: Scenario) -> Batch | None: ...

    @abstractmethod
    def propose(self, scenario: Scenario, batch: Batch) -> Candidate: ...

    def checks(self, scenario: Scenario, candidate: Candidate) -> list[Callable[[], CheckResult]]:
        return []

    def deliver(self, scenario: Scenario, release: Release) -> None:  # noqa: B027 - optional hook
        """Make ``release`` the one served."""

    #: how a canary of this recipe's candidates reaches its sessions: ``harness`` (the launcher
    #: renders the candidate's tree) or ``weights`` (the daemon serves it, :meth:`serve_canary`)
    canary_kind: ClassVar[str] = "harness"

    def serve_canary(self, scenario: Scenario, canary: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        """Serve the canary's candidate (``canary["tree"]``) to its sessions, under the engine key
        :func:`reef_core.learning.canary.canary_key` names (weights recipes)."""

    def drop_canary(self, scenario: Scenario, canary: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        """The canary ended: stop serving its candidate."""

    def rejected(self, scenario: Scenario, candidate: Candidate) -> None:  # noqa: B027 - optional hook
        """The checks turned ``candidate`` down; nothing was published."""

    def learn_now(self) -> str:
        """Run a learning step now, on whatever material there is; returns a ticket the step's
        progress is kept under.  Only recipes that learn from usage can."""
        raise InvalidInput(f"the {self.name} recipe does not learn from usage (reefine does)", field="recipe")

    @classmethod
    def check_config(cls, config: dict[str, Any]) -> None:
        """Refuse a bad ``recipe.config`` (a :class:`ConfigError` naming the setting) when the
        daemon starts, not on the first request that opens a scenario.  The default checks
        nothing: a recipe without settings of its own ignores them."""
        del config

    def rebase(self, scenario: Scenario, record: dict[str, Any], new_base: Release) -> str | None:
        """The tree of a candidate (described by its step ``record``) rebuilt on ``new_base``.

        ``None`` (the default) means it cannot be: the candidate is rejected as a conflict.  A
        recipe that knows why (what changed under the candidate) raises a ``ConflictError``
        saying so instead; the verdict and a promote's refusal carry its message.
        """
        return None


class BasicRecipe(Recipe):
    """Record only: every exchange is kept, nothing is learned."""

    name = "basic"

    def next_batch(self, scenario: Scenario) -> Batch | None:
        return None

    def propose(self, scenario: Scenario, batch: Batch) -> Candidate:  # pragma: no cover - never asked
        raise NotImplementedError("the basic recipe learns nothing")
