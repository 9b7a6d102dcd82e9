"""GEPA (reflective prompt evolution with a Pareto archive) on a harness, learning from usage.

``--recipe.implementation recipes.gepa:GepaRecipe``.  A step runs when ``usage-min-sessions`` new
scored sessions exist, or on ``reef learn`` (reefine's usage batch, ``usage_step.py``; the
next-turn judge scores sessions between steps as it does for reefine):

* **candidates** are harness trees that differ in their text components: the rules files and
  skills of the current release (and ``rules/learned`` when it has no rule yet);
* **instances** are recorded sessions with feedback: the held-out ones (reefine's rule,
  ``usage.held_out``) validate, at most ``val-max-sessions`` of them, the newest and the
  negative first; the step's batch (scored sessions no earlier step used) trains;
* **the search** (``search.py``) keeps a Pareto archive per validation session, mutates one
  component at a time by reflection on failing sessions and their feedback, and accepts a child
  only when it beats its parent on the same minibatch.  Scores come from the replay gate's
  pairwise judge (``recipes/reefine/replay.py``) against the current release;
* **the publish rule**: the archive's best member (the highest mean validation score) becomes
  the candidate only when its mean is strictly above the current release's (0.5: a tree ties
  itself).  Otherwise the step records that nothing beat the release and publishes nothing.

The candidate then goes through the normal checks (reefine's ``well_formed``, ``screens`` and
``health``, and ``improves``: the strict-improvement rule as a check, against the release it was
measured on) and the pending rule: a changed line the person's words do not carry, risky text,
or a removed line of a rule waits for a person (``provenance.py``), as extension code does.  The
step record holds the archive, every mutation tried and the decision (``record["gepa"]``).  A
candidate whose base moved (another publish, a rollback) is not rebuilt: its validation was
against the old release, so it is a conflict, and the next step measures afresh.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

from recipes.gepa import provenance
from recipes.gepa.search import Limits, Run, Search, Session
from recipes.reefine import reflect, replay, usage
from recipes.reefine.proposer import StepSkipped
from recipes.reefine.recipe import ReefineConfig, ReefineRecipe
from reef_core.errors import ConfigError, ConflictError
from reef_core.harness import HarnessTree, changed_entries
from reef_core.learning import Batch, Budgets, Candidate, CheckResult, RecipeContext
from reef_core.learning.model import CountingModel
from reef_core.learning.worker import WORKER_SETTINGS
from reef_core.store import Release, Scenario

__all__ = ["SHARED", "GepaConfig", "GepaRecipe"]

#: reefine's settings GEPA takes as they are (the harness, the sessions, the judge, the checks)
SHARED = frozenset(
    {
        "adapter",
        "health",
        "health_timeout",
        "health_task",
        "judge_next_turn",
        "usage_min_sessions",
        "usage_max_sessions",
        "held_out_share",
        "retries",
        "max_tokens",
    }
)
SEED_RULE = "learned"  # the rules file a tree with no rule gets to write into


@dataclass(frozen=True)
class GepaConfig:
    iterations: int = 4  # mutations tried per step, at most
    minibatch_size: int = 3  # training sessions a mutation reads and is accepted on
    model_calls: int = 200  # per step: replays (4 calls a session), mutations
    val_max_sessions: int = 8  # held-out sessions a step validates on, at most
    val_min_sessions: int = 3  # fewer held-out scored sessions than this: the step does not search
    component_chars: int = 4000  # the longest text a mutation may write for one component
    seed: int = 0  # of the parent draws and the minibatches (each step adds its number)

    @classmethod
    def parse(cls, config: dict[str, Any]) -> tuple[GepaConfig, ReefineConfig]:
        """GEPA's own settings, and reefine's that it shares (checked by reefine); a
        :class:`ConfigError` naming a setting neither knows, or a bad value."""
        own: dict[str, int] = {}
        shared: dict[str, Any] = {}
        known = {f.name for f in fields(cls)}
        for key, value in config.items():
            name = key.replace("-", "_")
            shown = f"recipe.config.{name.replace('_', '-')}"
            if name in SHARED or name in WORKER_SETTINGS:
                shared[key] = value
                continue
            if name not in known:
                listed = ", ".join(sorted(k.replace("_", "-") for k in known | SHARED))
                raise ConfigError(f"unknown gepa setting {shown} (known: {listed})", field=shown)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | str)
                or not str(value).strip().isdigit()
            ):
                raise ConfigError(f"{shown} must be a whole number, not {value!r}", field=shown)
            own[name] = int(value)
        made = cls(**own)
        for name in ("iterations", "minibatch_size", "model_calls", "val_max_sessions", "val_min_sessions"):
            if getattr(made, name) < 1:
                shown = f"recipe.config.{name.replace('_', '-')}"
                raise ConfigError(f"{shown} must be at least 1", field=shown)
        if made.val_min_sessions > made.val_max_sessions:
            raise ConfigError(
                "recipe.config.val-min-sessions must not be above recipe.config.val-max-sessions",
                field="recipe.config.val-min-sessions",
            )
        if made.component_chars < 200:
            raise ConfigError(
                "recipe.config.component-chars must be at least 200", field="recipe.config.component-chars"
            )
        return made, ReefineConfig.from_config(shared)


class GepaRecipe(ReefineRecipe):
    """reefine's sessions, judge, held-out rule and checks; GEPA's search instead of its steps."""

    name = "gepa"
    consumes = frozenset({"report", "record"})  # no asks: it learns from sessions only

    @classmethod
    def check_config(cls, config: dict[str, Any]) -> None:
        GepaConfig.parse(config)

    def __init__(self, context: RecipeContext) -> None:
        self.gepa, _ = GepaConfig.parse(context.config)
        shared = {k: v for k, v in context.config.items() if k.replace("-", "_") in SHARED}
        super().__init__(replace(context, config=shared))
        self.context = context  # the whole config: the worker's budgets and canary read it

    def next_batch(self, scenario: Scenario) -> Batch | None:
        if self._book is None:
            self._book = usage.ledger(stored.record for stored in scenario.releases.candidates())
        self._follow_sessions(scenario)
        return self._usage_batch()

    # -- a step ------------------------------------------------------------------------------------

    def propose(self, scenario: Scenario, batch: Batch) -> Candidate:
        if self.context.model is None:
            raise StepSkipped("no served model is lent to the recipe (is an upstream configured?)")
        started = time.monotonic()
        chain = scenario.releases
        base = chain.tip()
        base_tree = HarnessTree.from_files(chain.files(base)) if base else HarnessTree.empty()
        adapters = self.adapters(scenario)
        did = usage.Stepped(held_out=int(batch.payload.get("held_out", 0)))
        known = self.sessions.sessions
        train = self._sessions(scenario, [known[s] for s in batch.payload["sessions"] if s in known])
        did.sessions = [
            {
                "session": s.id,
                "score": s.score,
                "scored_by": "person" if s.material.session.explicit else "judge",
            }
            for s in train
        ]
        val = self._sessions(scenario, self._validation())
        record: dict[str, Any] = {"learned_from": "usage", "proposer": "gepa", "adapter": list(adapters)}

        def skipped(why: str, **gepa: Any) -> StepSkipped:
            did.why = why
            return StepSkipped(why, record={**record, "usage": did.to_json(), "gepa": gepa})

        if not train:
            raise skipped("nothing new to learn from: no scored session the step may train on")
        if len(val) < self.gepa.val_min_sessions:
            raise skipped(
                f"not enough held-out sessions to validate on: {len(val)}, recipe.config.val-min-sessions "
                f"is {self.gepa.val_min_sessions} (held-out-share {self.config.held_out_share:g})"
            )
        model = CountingModel(self.context.model, self.gepa.model_calls)
        components = _components(base_tree)
        seconds = Budgets.from_config(self.context.config).step_seconds  # the worker's limit
        limits = Limits(
            iterations=self.gepa.iterations,
            minibatch_size=self.gepa.minibatch_size,
            seed=self.gepa.seed + len(chain.candidates()),
            max_chars=self.gepa.component_chars,
            retries=self.config.retries,
            max_tokens=self.config.max_tokens,
            deadline=started + seconds / 2,
        )
        run = Search(model, base_tree, components, train, val, self._prompt, limits).run()
        best, seed = run.archive.best(), run.archive.members[0]
        decision = {
            "rule": "publish only a member whose mean validation score is strictly above the release's",
            "best": best.id,
            "best_score": round(best.mean, 4),
            "release_score": round(seed.mean, 4),
            "improves": best.mean > seed.mean,
        }
        gepa = _account(run, base, train, val, components, model, decision)
        if not decision["improves"]:
            raise skipped(
                f"nothing beat {base.name if base else 'the empty harness'} on validation: the best mean "
                f"{best.mean:.3f} is not above the release's {seed.mean:.3f} ({len(run.mutations)} "
                f"iteration(s), ended: {run.stopped})",
                **gepa,
            )
        phrases = provenance.persons_phrases([s.material for s in train])
        did.held = provenance.held_lines(base_tree, best.tree, phrases)
        summary = _summary(base_tree, best.tree, best.mean, seed.mean, len(val))
        did.why = summary
        learned = {"kind": "gepa", "sessions": len(train), "validation": len(val)}
        tree = self._stamp(best.tree, base_tree, summary, "delivers", learned)
        record.update(
            ask=summary,
            design=f"GEPA: member {best.id} of {len(run.archive.members)}; {run.stopped}",
            changes=[c.to_json() for c in changed_entries(base_tree, tree)],
            usage=did.to_json(),
            gepa=gepa,
        )
        return self._learned(scenario, base_tree, tree, summary, record, model, held=bool(did.held))

    def _validation(self) -> list[usage.Known]:
        """The held-out scored sessions a step validates on: the negative first, then the newest."""
        held = [
            k
            for k in self.sessions.sessions.values()
            if k.first and k.view().score is not None and usage.held_out(k.id, self.config.held_out_share)
        ]
        held.sort(key=lambda k: (not k.view().negative, -(int(k.last[4:], 16) if k.last else 0)))
        return held[: self.gepa.val_max_sessions]

    def _sessions(self, scenario: Scenario, known: list[usage.Known]) -> list[Session]:
        out = []
        for session in known:
            made = self._replay_case(scenario, session)
            if made is None:
                continue
            stuff = reflect.material(scenario, session, lambda name: self._served(scenario, name))
            out.append(Session(session.id, made[0], made[1], stuff, float(stuff.session.score or 0.0)))
        return out

    def _prompt(self, case: replay.ReplayCase, served: HarnessTree | None, tree: HarnessTree) -> str:
        """The system prompt of a replayed session with ``tree``: its harness's ``prompt_context``."""
        return self._renderer(case.harness or self.config.adapter).prompt_context(case.system, served, tree)

    # -- the checks ----------------------------------------------------------------------------------

    def checks(self, scenario: Scenario, candidate: Candidate) -> list[Callable[[], CheckResult]]:
        kept = [c for c in self.release_checks(scenario, candidate) if c.__name__ in _REEFINE_CHECKS]

        def improves() -> CheckResult:
            decision = (candidate.record.get("gepa") or {}).get("decision") or {}
            measured = (candidate.record.get("gepa") or {}).get("base")
            tip = scenario.releases.tip()
            if (tip.name if tip else None) != measured:
                return CheckResult(
                    "improves",
                    False,
                    f"validated against {measured or 'the empty harness'}, but "
                    f"{tip.name if tip else 'no release'} serves now",
                )
            best, release = float(decision.get("best_score", 0)), float(decision.get("release_score", 0))
            passed = bool(decision.get("improves")) and best > release
            relation = "above" if passed else "not above"
            against = measured or "the empty harness"
            detail = f"mean validation score {best:.3f} is {relation} {against}'s {release:.3f}"
            return CheckResult("improves", passed, detail, {"validation": best, "release": release})

        return [*kept, improves]

    def rebase(self, scenario: Scenario, record: dict[str, Any], new_base: Release) -> str | None:
        measured = (record.get("gepa") or {}).get("base")
        raise ConflictError(
            f"GEPA measured this candidate against {measured or 'the empty harness'}; on {new_base.name} "
            "that validation does not hold (the next step measures afresh)"
        )


#: reefine's checks a GEPA candidate goes through (its reviewer and replay gate do not apply:
#: the validation replay is GEPA's own, ``improves``)
_REEFINE_CHECKS = ("well_formed", "screens", "health")


def _components(tree: HarnessTree) -> list[tuple[str, str]]:
    """The text components GEPA mutates: each rules file and skill reef does not own, and
    ``rules/learned`` when the tree has no rule to write into."""
    found = [
        (e.kind, e.name) for e in tree.entries.values() if e.kind in ("rule", "skill") and not e.reserved
    ]
    if not any(kind == "rule" for kind, _ in found):
        found.insert(0, ("rule", SEED_RULE))
    return found


def _account(
    run: Run,
    base: Release | None,
    train: list[Session],
    val: list[Session],
    components: list[tuple[str, str]],
    model: CountingModel,
    decision: dict[str, Any],
) -> dict[str, Any]:
    """The run, as the step record keeps it."""
    return {
        "base": base.name if base else None,
        "components": [f"{kind}/{name}" for kind, name in components],
        "training": [s.id for s in train],
        "validation": [s.id for s in val],
        "archive": run.archive.to_json(),
        "fronts": {s: sorted(ids) for s, ids in run.archive.undominated().items()},
        "mutations": run.mutations,
        "stopped": run.stopped,
        "model_calls": model.calls,
        "decision": decision,
    }


def _summary(base: HarnessTree, tree: HarnessTree, best: float, release: float, sessions: int) -> str:
    changed = ", ".join(f"{c.kind} {c.name}" for c in changed_entries(base, tree))
    return (
        f"GEPA rewrote {changed}: validation {best:.2f} against {release:.2f} "
        f"on {sessions} held-out session(s)"
    )
