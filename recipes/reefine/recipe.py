"""reefine: plain-language asks, and how the harness is used, become checked, versioned releases.

Two kinds of step, asks first:

* **ask** (one per step): the proposer turns a person's ask into entry changes;
* **usage** (``usage_step.py``): when ``usage-min-sessions`` new scored sessions exist (or on
  ``reef learn``), lessons reflected from them become delta edits of the tree, and the
  candidate must also win the replay gate (``replay.py``) on held-out sessions.

Between steps the worker keeps an index of the scenario's sessions (``usage.py``) and, with
``judge-next-turn``, judges each new turn's previous answer by the user's next message
(``judge.py``), storing the verdict as a report.

This module holds the recipe contract (:class:`ReefineRecipe`'s ``Recipe`` methods), its
settings (:class:`ReefineConfig`), batching and the ask step.  The usage step is
:class:`~recipes.reefine.usage_step.UsageStep`; the release checks (``well_formed``,
``screens``, ``health``, ``reviewer``, ``replay``, their table in ``checks.py``) are
:class:`~recipes.reefine.checks.ReleaseChecks`.

For an ask step, the proposer (the served model, unrecorded) turns the ask into entry changes on
the current release's tree; the candidate must pass every release check.

A scenario's adapters are those it is installed for (``POST /reef/harness/installed`` or a
harness's first recorded request notes them, ``Scenario.installed_adapters``) and
``recipe.config.adapter`` (default ``pi``): the proposer is told each one's facts,
``well_formed`` renders for each, and ``health`` runs each harness (pi's first, then Claude
Code's: each adapter's health check, found through ``reef_core.harness.health_check_for``).
Entries one harness has no form for (pi extensions in Claude Code) are skipped there, and
``well_formed`` says so (the renderer's ``skipped``).

A candidate that adds, changes or removes extension code (or hook-like config) waits as
pending for a person.  The change list is kept in the step record, so a candidate whose base
moved (a rollback, another step) is rebuilt by re-applying it to the new tip.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from recipes.reefine import usage
from recipes.reefine.agent import AgentProposer, agent_available, agent_pi
from recipes.reefine.checks import ReleaseChecks
from recipes.reefine.proposer import Proposer, StepSkipped
from recipes.reefine.usage_step import UsageStep
from reef_core.errors import ConfigError, ReefError
from reef_core.harness import (
    ADAPTERS,
    Change,
    HarnessTree,
    Renderer,
    TreeError,
    needs_approval,
    renderer_for,
)
from reef_core.learning import Batch, Candidate, CheckResult, Recipe, RecipeContext
from reef_core.learning.model import CountingModel
from reef_core.learning.worker import WORKER_SETTINGS
from reef_core.store import Release, Scenario, ScenarioReader, build_tree

__all__ = ["ReefineConfig", "ReefineRecipe"]

HARNESS_REQUIRES = {"pi": ">=0.73.1"}


@dataclass(frozen=True)
class ReefineConfig:
    adapter: str = "pi"  # always among the adapters; installs add theirs (the module docstring)
    revisions: int = 2  # self-review "partial" → revise, at most this often
    retries: int = 2  # an unusable answer is sent back with its problem, at most this often
    model_calls: int = 12  # per step, proposer, self-review and reviewer together
    max_tokens: int = 4096
    health: bool = True  # run the real harness on the candidate
    health_timeout: float = 120.0
    health_task: str = "Reply with the single word READY."
    # learning from usage (usage.py, judge.py, replay.py)
    judge_next_turn: bool = True  # judge each new turn's previous answer by the user's next message
    usage_min_sessions: int = 5  # new scored sessions that start a usage step by themselves
    usage_max_sessions: int = 8  # sessions one usage step reflects on
    usage_model_calls: int = 24  # per usage step: reflections, curation and review
    held_out_share: float = 0.3  # sessions never learned from, only replayed by the gate
    max_edits: int = 4  # delta edits per usage step; more is a rewrite, refused
    rules_budget: int = 2000  # characters of one rules file (rules go with every request)
    replay_asks: bool = False  # the replay gate also applies to asks
    replay_confidence: float = 0.9  # 1 - the error budget all of a learner's replay gates share
    replay_max_calls: int = 40  # model calls of one replay gate (4 per held-out session)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ReefineConfig:
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in config.items():
            name = key.replace("-", "_")
            shown = name.replace("_", "-")  # as the flag and the docs spell it
            if name in WORKER_SETTINGS:
                continue  # the worker's budgets and canary
            if name not in known:
                listed = ", ".join(sorted(k.replace("_", "-") for k in known))
                raise ConfigError(
                    f"unknown reefine setting recipe.config.{shown} (known: {listed})",
                    field=f"recipe.config.{shown}",
                )
            default = getattr(cls, name)
            try:
                values[name] = _coerce(value, type(default))
            except (TypeError, ValueError) as exc:
                raise ConfigError(
                    f"recipe.config.{shown} must be {_KINDS[type(default)]}, not {value!r}",
                    field=f"recipe.config.{shown}",
                ) from exc
        made = cls(**values)
        if not 0 <= made.held_out_share < 1:
            raise ConfigError(
                "recipe.config.held-out-share must be from 0 to below 1", field="recipe.config.held-out-share"
            )
        if not 0.8 <= made.replay_confidence < 1:
            raise ConfigError(
                "recipe.config.replay-confidence must be from 0.8 to below 1 (below 0.8, a few lucky "
                "wins would publish a candidate that is no better)",
                field="recipe.config.replay-confidence",
            )
        for name in (
            "usage_min_sessions",
            "usage_max_sessions",
            "max_edits",
            "rules_budget",
            "replay_max_calls",
        ):
            if getattr(made, name) < 1:
                key = name.replace("_", "-")
                raise ConfigError(f"recipe.config.{key} must be at least 1", field=f"recipe.config.{key}")
        return made


_KINDS = {bool: "true or false", int: "a whole number", float: "a number", str: "text"}


def _coerce(value: Any, kind: type) -> Any:
    if kind is bool:
        if isinstance(value, str):
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(value)
            return value.lower() in ("true", "1")
        return bool(value)
    return kind(value)


class ReefineRecipe(UsageStep, ReleaseChecks, Recipe):
    """The recipe: batching and the ask step here, the usage step and the checks mixed in."""

    name = "reefine"
    consumes = frozenset({"ask", "report", "record"})
    needs_model_endpoint = True

    @classmethod
    def check_config(cls, config: dict[str, Any]) -> None:
        ReefineConfig.from_config(config)

    def __init__(self, context: RecipeContext) -> None:
        super().__init__(context)
        self.config = ReefineConfig.from_config(context.config)
        self.renderer = renderer_for(self.config.adapter)
        self._renderers: dict[str, Renderer] = {self.config.adapter: self.renderer}
        self._taken: set[str] | None = None
        self._cursor: str | None = None
        self._queue: deque[tuple[str, dict[str, Any]]] = deque()
        self.sessions = usage.SessionIndex()
        self._book: usage.Ledger | None = None
        self._learn: deque[str] = deque()
        self._trees: dict[str, HarnessTree | None] = {}
        #: what the recipe did between steps, for ``reef status`` (judge calls, their failures)
        self.stats: dict[str, Any] = {"judged": 0, "judge_failures": 0, "judge_seconds": []}

    def learn_now(self) -> str:
        ticket = f"learn_{uuid.uuid4().hex[:16]}"
        self._learn.append(ticket)
        return ticket

    # -- batches: asks first, oldest first; then usage -------------------------------------------

    def next_batch(self, scenario: Scenario) -> Batch | None:
        if self._taken is None:
            self._taken = set()
            records = [stored.record for stored in scenario.releases.candidates()]
            for record in records:
                self._taken.update(record.get("batch", {}).get("items", []))
            self._book = usage.ledger(records)
        # this node's asks only: another node acts on its own, and a cursor over merged refs
        # would miss an ask a fetch brings in late
        for item in scenario.own_data.iter_items(["ask"], after=self._cursor):
            self._cursor = item.id
            settled = (item.data.get("imported") or {}).get("settled")  # the original Reef acted on it
            if item.id not in self._taken and not settled:
                self._queue.append((item.id, item.data))
        if self._queue:
            ask_id, data = self._queue.popleft()
            self._taken.add(ask_id)
            return Batch((ask_id,), payload=data, summary=f"ask {ask_id}")
        self._follow_sessions(scenario)
        return self._usage_batch()

    # -- a step ------------------------------------------------------------------------------------

    def propose(self, scenario: Scenario, batch: Batch) -> Candidate:
        if self.context.model is None:
            raise StepSkipped("no served model is lent to the recipe (is an upstream configured?)")
        if isinstance(batch.payload, dict) and batch.payload.get("kind") == "usage":
            return self._propose_usage(scenario, batch)
        ask = str(batch.payload["text"])
        chain = scenario.releases
        base = chain.tip()
        base_tree = HarnessTree.from_files(chain.files(base)) if base else HarnessTree.empty()
        model = CountingModel(self.context.model, self.config.model_calls)
        adapters = self.adapters(scenario)
        proposer, how = self._proposer(scenario, model, adapters)
        proposal = proposer.propose(base_tree, ask)
        tree = self._stamp(proposal.tree, base_tree, ask, proposal.self_review["verdict"], {"kind": "ask"})
        files = tree.files()
        record = {
            "ask_id": batch.item_ids[0],
            "ask": ask,
            "design": proposal.design,
            "changes": [c.to_json() for c in proposal.changes],
            "self_review": proposal.self_review,
            "revisions": proposal.revisions,
            "retries": proposal.retries,
            "notes": list(proposal.notes),
            "adapter": list(adapters),
            "proposer": how,
        }
        return Candidate(
            tree=str(build_tree(scenario.handle.repo, files)),
            operation="evolve",
            ask=ask,
            record=record,
            payload=model,
            needs_approval=needs_approval(base_tree, tree),
        )

    def _served(self, scenario: Scenario, release: str | None) -> HarnessTree | None:
        """The tree of a release by name (cached; None when unknown or gone)."""
        if release is None:
            return None
        if release not in self._trees:
            try:
                self._trees[release] = HarnessTree.from_files(
                    scenario.releases.files(scenario.releases.get(release))
                )
            except (ReefError, ValueError):
                self._trees[release] = None
        return self._trees[release]

    def adapters(self, scenario: ScenarioReader) -> tuple[str, ...]:
        """The adapters a candidate for ``scenario`` must work in: those it is installed for and
        ``config.adapter``, in :data:`ADAPTERS` order (pi's first); read afresh each time, so an
        install between steps counts from the next one."""
        wanted = scenario.installed_adapters() | {self.config.adapter}
        return tuple(name for name in ADAPTERS if name in wanted)

    def _renderer(self, adapter: str) -> Renderer:
        if adapter not in self._renderers:
            self._renderers[adapter] = renderer_for(adapter)
        return self._renderers[adapter]

    def _facts(self, adapters: tuple[str, ...]) -> tuple[str, str]:
        """What the proposer is told: the harness names, and each harness's facts."""
        if len(adapters) == 1:
            return adapters[0], self._renderer(adapters[0]).facts()
        names = " and ".join(adapters)
        head = (
            f"The tree is installed for {len(adapters)} harnesses: {names}. Each entry goes to every one "
            "of them, so write entries that work in each (an entry kind a harness has no form for is "
            "skipped there). What each harness does with an entry:"
        )
        return names, "\n\n".join([head, *(self._renderer(a).facts().strip() for a in adapters)])

    def _proposer(
        self, scenario: Scenario, model: CountingModel, adapters: tuple[str, ...]
    ) -> tuple[Proposer | AgentProposer, str]:
        """The agent proposer when REEF_PROPOSER_SANDBOX asks for it and this host can run it;
        else the text proposer, saying why."""
        names, facts = self._facts(adapters)
        text = Proposer(
            model,
            adapter=names,
            facts=facts,
            revisions=self.config.revisions,
            retries=self.config.retries,
            max_tokens=self.config.max_tokens,
        )
        sandbox = self.context.proposer_sandbox
        if not sandbox:
            return text, "text"
        pi = agent_pi()
        ok, why = agent_available(sandbox, pi=pi)
        if not ok or pi is None or self.context.daemon_url is None:
            why = why or "the daemon's address is not known yet"
            self.context.log(f"reefine: the agent proposer cannot run here ({why}); using the text proposer")
            return text, f"text (agent proposer unavailable: {why})"
        agent = AgentProposer(
            sandbox=sandbox,
            daemon_url=self.context.daemon_url,
            scenario=scenario.name,
            model=self.context.served_model,
            token=self.context.token,
            facts=facts,
            pi=pi,
            health_timeout=self.config.health_timeout,
            health_task=self.config.health_task,
        )
        return agent, f"agent ({sandbox})"

    @staticmethod
    def _stamp(
        tree: HarnessTree, base: HarnessTree, ask: str, verdict: str, learned: dict[str, Any] | None
    ) -> HarnessTree:
        """The manifest: the tree's own version (one more than its base's), ask, requirements,
        and what it learned from."""
        version = (base.manifest.version or 0) + 1
        return tree.with_manifest(
            version=version, ask=ask, requires=dict(HARNESS_REQUIRES), verdict=verdict, learned_from=learned
        )

    def checks(self, scenario: Scenario, candidate: Candidate) -> list[Callable[[], CheckResult]]:
        return self.release_checks(scenario, candidate)

    # -- the chain moved: the same changes on the new tip ---------------------------------------

    def rebase(self, scenario: Scenario, record: dict[str, Any], new_base: Release) -> str | None:
        if record.get("learned_from") == "usage":
            return self._rebase_usage(scenario, record, new_base)
        raw = record.get("changes")
        ask = record.get("ask")
        if not isinstance(raw, list) or not isinstance(ask, str):
            return None
        try:
            changes = [Change.from_json(item, where=f"changes[{i}]") for i, item in enumerate(raw)]
            base = HarnessTree.from_files(scenario.releases.files(new_base))
            tree = base.apply(changes)
        except TreeError:
            return None
        if tree.problems():
            return None
        verdict = str(record.get("self_review", {}).get("verdict", "delivers"))
        learned = {"kind": "usage"} if record.get("learned_from") == "usage" else {"kind": "ask"}
        return str(build_tree(scenario.handle.repo, self._stamp(tree, base, ask, verdict, learned).files()))
