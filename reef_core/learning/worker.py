"""One background worker per scenario: batch → candidate → checks → release, within budgets.

Recording never waits for learning: the daemon only :meth:`LearningWorker.notify`\\ s the
worker, which runs in a thread of its own.  Every step leaves a candidate ref with its step
record (what it learned from, what each check said, the verdict), whether it was selected,
rejected or skipped; a selected one becomes a release and is delivered to serving.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from reef_core import memory
from reef_core.errors import ConflictError
from reef_core.learning.canary import SETTINGS as CANARY_SETTINGS
from reef_core.learning.canary import CanaryWatch, plan_from_config
from reef_core.learning.recipe import Batch, Candidate, CheckResult, Recipe
from reef_core.store import Release, Scenario, build_tree

__all__ = ["WORKER_SETTINGS", "Budgets", "LearningWorker", "StepOutcome"]

log = logging.getLogger(__name__)

#: the ``recipe.config`` keys the worker reads (its budgets, and the canary's), not the recipe:
#: every recipe accepts them
WORKER_SETTINGS = frozenset({"max_steps", "failure_streak", "step_seconds", "poll_seconds"}) | CANARY_SETTINGS
_CONFLICT_RETRIES = 2  # a step whose base moved is rebuilt and checked again at most this often


@dataclass(frozen=True)
class Budgets:
    max_steps: int | None = None  # stop learning after this many steps
    failure_streak: int = 20  # pause after this many steps in a row that published nothing
    step_seconds: float = 600.0  # a step slower than this is rejected, whatever its checks say
    poll_seconds: float = 1.0  # how often to look for a batch without being notified

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Budgets:
        def number(key: str, default: Any) -> Any:
            value = config.get(key, default)
            return default if value is None else value

        return cls(
            max_steps=config.get("max_steps"),
            failure_streak=int(number("failure_streak", 20)),
            step_seconds=float(number("step_seconds", 600.0)),
            poll_seconds=float(number("poll_seconds", 1.0)),
        )


@dataclass(frozen=True)
class StepOutcome:
    step: int
    verdict: str  # "selected", "pending", "canary", "rejected: …", "skipped: …"
    release: Release | None
    checks: tuple[CheckResult, ...]
    seconds: float
    finished_at: float = field(default_factory=time.time)
    candidate_step: int | None = None


class LearningWorker:
    def __init__(
        self,
        scenario: Scenario,
        recipe: Recipe,
        budgets: Budgets,
        *,
        on_outcome: Callable[[StepOutcome], None] | None = None,
    ) -> None:
        self.scenario = scenario
        self.recipe = recipe
        self.budgets = budgets
        self.on_outcome = on_outcome
        self.outcomes: list[StepOutcome] = []
        self.steps = 0
        self.proposed_seconds = 0.0  # the step's propose (training, for grpo)
        self.streak = 0
        self.state = "starting"
        #: item id -> {"state": proposing|checking|settled, "result": …} for items this worker took
        self.progress: dict[str, dict[str, Any]] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._active_at = time.monotonic()  # the last notify, or the end of the last step
        self._delivery = threading.Lock()  # a step and a rollback never deliver at once
        #: the scenario's canary (:mod:`reef_core.learning.canary`), once the recipe attached
        self.canary: CanaryWatch | None = None
        self._thread = threading.Thread(target=self._run, name=f"reef-learner:{scenario.name}", daemon=True)

    def start(self) -> LearningWorker:
        self._thread.start()
        return self

    def notify(self) -> None:
        self._active_at = time.monotonic()
        self._wake.set()

    def idle_for(self) -> float:
        """Seconds since the worker was last told of new work or finished a step."""
        return time.monotonic() - self._active_at

    def stop(self, timeout: float = 30) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def deliver(self, release: Release) -> None:
        """Serve ``release`` now (after a rollback or promote made outside a step)."""
        with self._delivery:
            self.recipe.deliver(self.scenario, release)

    # -- the loop ----------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self.recipe.attach(self.scenario)
        except Exception as exc:
            self.state = f"stopped: the recipe could not start: {exc}"
            log.exception("recipe %s failed to attach to %s", self.recipe.name, self.scenario.name)
            return
        try:
            self.canary = CanaryWatch(
                self.scenario,
                plan_from_config(self.recipe.context.config),
                publish=self._publish_canary,
                serve=lambda state: self.recipe.serve_canary(self.scenario, state),
                drop=lambda state: self.recipe.drop_canary(self.scenario, state),
            )
        except Exception as exc:
            self.state = f"stopped: the canary could not resume: {exc}"
            log.exception("the canary of %s could not resume", self.scenario.name)
            return
        self.state = "idle"
        while not self._stop.is_set():
            if self.budgets.max_steps is not None and self.steps >= self.budgets.max_steps:
                self.state = f"stopped: max_steps {self.budgets.max_steps} reached"
                return
            if self.streak >= self.budgets.failure_streak:
                self.state = f"stopped: {self.streak} steps in a row published nothing"
                return
            self._wake.wait(self.budgets.poll_seconds)
            self._wake.clear()
            if self._stop.is_set():
                break
            if self.canary.running is not None:
                self.state = f"canary {self.canary.running['name']}"
                try:
                    self.canary.decide_now()  # the next candidate waits until the canary ends
                except Exception:
                    log.exception("the canary of %s could not be decided", self.scenario.name)
                if self.canary.running is not None:
                    continue
                self.state = "idle"
            try:
                batch = self.recipe.next_batch(self.scenario)
            except Exception:
                log.exception("recipe %s could not form a batch", self.recipe.name)
                continue
            if batch is not None:
                try:
                    self._step(batch)
                except Exception:  # storing or publishing failed: the worker goes on with the next
                    log.exception("a step on %s could not be stored or published", self.scenario.name)
                    self.streak += 1
                    self.state = "idle"
                self._wake.set()  # there may be more ready already
        self.state = "stopped"

    def _step(self, batch: Batch) -> None:
        """One step, its peak memory in its record; what it freed handed back after it."""
        try:
            with memory.watch() as peak:
                self._step_watched(batch, peak)
        finally:
            memory.give_back()

    def _step_watched(self, batch: Batch, peak: memory.Peak) -> None:
        self.state = "stepping"
        started = time.perf_counter()
        self.proposed_seconds = 0.0
        self._mark(batch, "proposing")
        base = self.scenario.releases.tip()
        checks: list[CheckResult] = []
        candidate: Candidate | None = None
        skipped_record: dict[str, Any] = {}
        try:
            candidate = self.recipe.propose(self.scenario, batch)
            self.proposed_seconds = time.perf_counter() - started
            self._mark(batch, "checking")
            checks = self._check(candidate)
        except Exception as exc:
            verdict = f"skipped: {type(exc).__name__}: {exc}"
            told = getattr(exc, "record", None)  # what the step did before it stopped, for its record
            if isinstance(told, dict):
                skipped_record = told
            log.warning("step on %s skipped: %s", self.scenario.name, exc)
            log.debug("%s", traceback.format_exc())
        else:
            verdict = self._verdict(candidate, checks, started)
        release, step = None, None
        for attempt in range(_CONFLICT_RETRIES + 1):
            seconds = time.perf_counter() - started
            settled = self._settle(
                candidate,
                batch,
                base,
                checks,
                verdict,
                seconds,
                retry=attempt < _CONFLICT_RETRIES,
                told=skipped_record,
                peak_rss=peak.read(),
            )
            release, step = settled.release, settled.step
            if settled.rebased is None or candidate is None:
                verdict = settled.verdict  # what storing it made of it: a conflict, a canary
                break
            # the chain moved under the step: the same change, rebuilt on the new tip, checked again
            base = settled.new_base
            candidate = replace(candidate, tree=settled.rebased)
            self._mark(batch, "checking")
            checks = self._check(candidate)
            verdict = self._verdict(candidate, checks, started)
        seconds = time.perf_counter() - started
        outcome = StepOutcome(self.steps + 1, verdict, release, tuple(checks), seconds, candidate_step=step)
        self.steps += 1
        self.streak = 0 if verdict in ("selected", "pending", "canary") else self.streak + 1
        self.outcomes = [*self.outcomes[-99:], outcome]
        self._settled(batch, outcome)
        self._active_at = time.monotonic()
        self.state = "idle"
        if self.on_outcome is not None:
            self.on_outcome(outcome)

    def _check(self, candidate: Candidate) -> list[CheckResult]:
        """Run the checks in order and stop at the first that fails: a candidate that failed a
        screen must not go on to be shown to a harness or a reviewer."""
        results = []
        for check in self.recipe.checks(self.scenario, candidate):
            results.append(_run_check(check))
            if not results[-1].passed:
                break
        return results

    def _verdict(self, candidate: Candidate, checks: list[CheckResult], started: float) -> str:
        failed = [c.name for c in checks if not c.passed]
        seconds = time.perf_counter() - started
        if seconds > self.budgets.step_seconds:
            failed.append(f"step took {seconds:.0f}s > {self.budgets.step_seconds:.0f}s")
        if failed:
            return "rejected: " + ", ".join(failed)
        return "pending" if candidate.needs_approval else "selected"

    # -- progress, by the items a step consumed -------------------------------------------------

    def _mark(self, batch: Batch, state: str) -> None:
        for item in batch.item_ids:
            self.progress[item] = {"state": state, "result": None}

    def _settled(self, batch: Batch, outcome: StepOutcome) -> None:
        result = {
            "verdict": outcome.verdict,
            "release": outcome.release.name if outcome.release else None,
            "step": outcome.candidate_step,
            "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail} for c in outcome.checks],
        }
        for item in batch.item_ids:
            self.progress[item] = {"state": "settled", "result": result}

    # -- storing the step and publishing ---------------------------------------------------------

    def _settle(
        self,
        candidate: Candidate | None,
        batch: Batch,
        base: Release | None,
        checks: list[CheckResult],
        verdict: str,
        seconds: float,
        *,
        retry: bool,
        told: dict[str, Any] | None = None,
        peak_rss: int | None = None,
    ) -> _Settled:
        chain = self.scenario.releases
        record = {
            **(candidate.record if candidate else told or {}),
            "recipe": self.recipe.name,
            "batch": {"items": list(batch.item_ids), "summary": batch.summary},
            "checks": [
                {
                    "name": c.name,
                    "passed": c.passed,
                    "detail": c.detail,
                    "metrics": c.metrics,
                    "seconds": c.seconds,
                    **({"data": c.data} if c.data else {}),
                }
                for c in checks
            ],
            "seconds": round(seconds, 3),
            "propose_seconds": round(self.proposed_seconds, 3),
            # the daemon's peak resident memory while the step proposed and checked
            # (reef_core.memory)
            **({"peak_rss_bytes": peak_rss} if peak_rss is not None else {}),
        }
        tree = candidate.tree if candidate else (base.tree if base else _empty_tree(self.scenario))
        ask = candidate.ask if candidate else None
        with self.scenario.publish_lock:  # this process's publishers take turns; others lose the CAS
            tip = chain.tip()
            moved = (tip.commit if tip else None) != (base.commit if base else None)
            if candidate is not None and verdict == "selected" and moved and tip is not None:
                rebased, why = self._rebase(record, tip) if retry else (None, "")
                verdict = (
                    f"rejected: conflict: the release chain moved from {base.name if base else 'none'} "
                    f"to {tip.name} during the step; "
                    + ("retried on the new tip" if rebased else "the change cannot be rebuilt on it")
                    + (f" ({why})" if why else "")
                )
                stored = chain.create_candidate(
                    tree, base=base, verdict=verdict, ask=ask, record={**record, "verdict": verdict}
                )
                if rebased is None:
                    self.recipe.rejected(self.scenario, candidate)
                return _Settled(None, stored.step, verdict, conflict=True, rebased=rebased, new_base=tip)
            if verdict == "selected" and base is not None and self.canary and self.canary.plan:
                verdict = "canary"  # serves a share of new sessions first; their scores decide
            stored = chain.create_candidate(
                tree, base=base, verdict=verdict, ask=ask, record={**record, "verdict": verdict}
            )
            if candidate is not None and verdict == "canary" and base is not None and self.canary:
                self.canary.start(
                    stored.step,
                    tree=str(candidate.tree),
                    base=base,
                    operation=candidate.operation,
                    ask=candidate.ask,
                    kind=self.recipe.canary_kind,
                )
                return _Settled(None, stored.step, verdict)
            if candidate is None or verdict not in ("selected", "pending"):
                if candidate is not None:
                    self.recipe.rejected(self.scenario, candidate)
                return _Settled(None, stored.step, verdict)
            if verdict == "pending":
                chain.mark_pending(stored.step)
                return _Settled(None, stored.step, verdict)
            try:
                release = chain.publish(
                    candidate.tree,
                    expected=base.commit if base else None,
                    operation=candidate.operation,
                    ask=candidate.ask,
                    verdict="selected",
                    source=f"candidate {stored.step}",
                )
            except ConflictError as exc:  # another process, or node, published between our look and our swap
                now = chain.tip()  # a remote's chain is adopted before its lost lease is raised
                rebased, why = None, ""
                if retry and now is not None and now.commit != (base.commit if base else None):
                    rebased, why = self._rebase(record, now)
                if rebased is None:
                    self.recipe.rejected(self.scenario, candidate)
                verdict = f"rejected: conflict: {exc}" + ("; retried on the new tip" if rebased else "")
                verdict += f"; the change cannot be rebuilt on it ({why})" if why else ""
                return _Settled(None, stored.step, verdict, conflict=True, rebased=rebased, new_base=now)
        with self._delivery:
            self.recipe.deliver(self.scenario, release)
        return _Settled(release, stored.step, verdict)

    def _publish_canary(self, state: dict[str, Any]) -> Release:
        """Publish a canary that is promoted: on the base it was tested against, or not at all."""
        with self.scenario.publish_lock:
            release = self.scenario.releases.publish(
                state["tree"],
                expected=state["base_commit"],
                operation=state["operation"],
                ask=state.get("ask"),
                verdict=f"canary: {state['why']}",
                source=f"candidate {state['step']}",
            )
        with self._delivery:
            self.recipe.deliver(self.scenario, release)
        return release

    def _rebase(self, record: dict[str, Any], tip: Release) -> tuple[str | None, str]:
        """The change rebuilt on ``tip`` (None: it cannot be), and why not when the recipe said
        (a :class:`ConflictError` from ``rebase``: what changed under it)."""
        try:
            return self.recipe.rebase(self.scenario, record, tip), ""
        except ConflictError as exc:
            return None, exc.message
        except Exception:
            log.exception("recipe %s could not rebase a candidate", self.recipe.name)
            return None, ""


@dataclass(frozen=True)
class _Settled:
    release: Release | None
    step: int
    verdict: str
    conflict: bool = False
    rebased: str | None = None  # the tree rebuilt on the new tip, to check and publish again
    new_base: Release | None = None


def _run_check(check: Callable[[], CheckResult]) -> CheckResult:
    name = getattr(check, "__name__", "check")
    started = time.perf_counter()
    try:
        result = check()
    except Exception as exc:  # a check that cannot decide rejects: the gate fails closed
        result = CheckResult(name=name, passed=False, detail=f"error: {type(exc).__name__}: {exc}")
    return replace(result, seconds=round(time.perf_counter() - started, 4))


def _empty_tree(scenario: Scenario) -> str:
    return str(build_tree(scenario.handle.repo, {}))
