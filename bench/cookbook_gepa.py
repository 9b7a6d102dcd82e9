"""GEPA on the simulated user, SIMULATED: the served release's score step by step, against no
learning and against reefine's usage learning on the same sessions, all in one run.

    python bench/cookbook_gepa.py [--seconds 60]

The user, the tasks and the scripted rule-following model are ``bench/usage.py``'s
(``bench/usage_sim.py``): two hidden wishes (the tests run before "done"; a one-line summary
first), said only in corrections and feedback; the model obeys the rule bullets in its system
prompt and plays every learning role by script, GEPA's reflective mutation included.  Each arm
runs the same rounds: 12 two-turn sessions on the served release (the same session ids and tasks
in every arm, so the same sessions are held out), then one learning step (``reef learn``):

* **no learning**: the rounds only (the baseline);
* **GEPA**: a ``LearningWorker`` running ``recipes.gepa:GepaRecipe`` (health off);
* **reefine**: ``bench/usage.py``'s gated arm (reflect, curate, the replay gate; its reflector
  also plants a harmful lesson every third step, which the gate keeps out).

Printed: GEPA's steps for seed 0 (the release served, the user's mean score on it, the verdict,
the best archive member's mean validation score against the release's 0.5, mutations tried and
accepted, model calls, wall time), then each arm's mean score per round over the seeds that fit
in ``--seconds``.  :func:`run` returns the same lines (the cookbook's runner calls it).
"""

from __future__ import annotations

import argparse
import logging
import queue
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.usage import SIMULATION, run_arm, run_round  # noqa: E402
from bench.usage_sim import SimModel  # noqa: E402
from recipes.gepa import GepaRecipe  # noqa: E402
from reef_core.learning import RecipeContext  # noqa: E402
from reef_core.learning.worker import Budgets, LearningWorker, StepOutcome  # noqa: E402
from reef_core.store import Store, StoreOptions  # noqa: E402

STEPS = 5
SESSIONS = 12
MAX_SEEDS = 5


class Learner:
    """A scenario in ``root``, the simulated user's rounds on it, and a worker running GEPA
    (``config`` over: health off, steps only on :meth:`learn`)."""

    def __init__(self, root: Path, model: SimModel, **config: Any) -> None:
        self.model = model
        settings = {"health": False, "usage-min-sessions": 100, **config}
        context = RecipeContext(
            cache_dir=root / "cache",
            config=settings,
            log=lambda _: None,
            model=model,
            served_model="m",
            daemon_url="http://127.0.0.1:9",
        )
        self.recipe = GepaRecipe(context)
        self.scenario = Store(root / "state", StoreOptions(pack_every=0)).open("usage", create=True)
        self.git_dir = str(root / "state" / "scenarios" / "usage.git")
        self.outcomes: queue.Queue[StepOutcome] = queue.Queue()
        self.worker = LearningWorker(
            self.scenario, self.recipe, Budgets(poll_seconds=3600), on_outcome=self.outcomes.put
        ).start()

    def round(self, step: int, seed: int = 0) -> float:
        """``SESSIONS`` sessions on the serving release; the user's mean score over them."""
        return run_round(self.scenario, seed, step, SESSIONS, [])[2]

    def learn(self) -> tuple[StepOutcome, dict[str, Any]]:
        """``reef learn``: one step now; its outcome and its step record."""
        self.recipe.learn_now()
        self.worker.notify()
        outcome = self.outcomes.get(timeout=120)
        assert outcome.candidate_step is not None
        return outcome, self.scenario.releases.candidate(outcome.candidate_step).record

    def close(self) -> None:
        self.worker.stop()
        self.scenario.close()


def gepa_arm(seed: int, steps: int) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as root:
        learner = Learner(Path(root), SimModel())
        try:
            for step in range(1, steps + 1):
                tip = learner.scenario.releases.tip()
                score = learner.round(step, seed)
                outcome, record = learner.learn()
                gepa = record.get("gepa") or {}
                decision = gepa.get("decision") or {}
                mutations = gepa.get("mutations") or []
                rows.append(
                    {
                        "step": step,
                        "served": tip.name if tip else "-",
                        "score": score,
                        "verdict": outcome.verdict.split(":")[0],
                        "published": outcome.release.name if outcome.release else "-",
                        "best": decision.get("best_score"),
                        "release": decision.get("release_score"),
                        "tried": sum("text" in m for m in mutations),
                        "accepted": sum(bool(m.get("accepted")) for m in mutations),
                        "calls": gepa.get("model_calls", 0),
                        "ms": outcome.seconds * 1000,
                    }
                )
        finally:
            learner.close()
    return rows


def baseline_arm(seed: int, steps: int) -> list[float]:
    with tempfile.TemporaryDirectory() as root:
        scenario = Store(Path(root) / "state", StoreOptions(pack_every=0)).open("usage", create=True)
        try:
            return [run_round(scenario, seed, step, SESSIONS, [])[2] for step in range(1, steps + 1)]
        finally:
            scenario.close()


def run(seconds_budget: int) -> list[str]:
    started = time.monotonic()
    curves: dict[str, list[list[float]]] = {"no learning": [], "GEPA": [], "reefine": []}
    first: list[dict[str, Any]] = []
    seeds = 0
    while seeds < MAX_SEEDS:
        spent = time.monotonic() - started
        if seeds and spent / seeds * (seeds + 1) > seconds_budget:
            break
        rows = gepa_arm(seeds, STEPS)
        first = first or rows
        curves["GEPA"].append([r["score"] for r in rows])
        curves["no learning"].append(baseline_arm(seeds, STEPS))
        curves["reefine"].append([r.score for r in run_arm(True, STEPS, SESSIONS, seeds, [])[0]])
        seeds += 1
    lines = [
        SIMULATION,
        f"{STEPS} rounds of {SESSIONS} two-turn sessions, a learning step after each; the same sessions "
        "in every arm",
        "",
        "GEPA, seed 0",
        f"{'step':>4} {'served':>6} {'score':>5}  {'verdict':<9} {'publ.':>5} {'val best':>8} {'release':>7} "
        f"{'tried':>5} {'acc.':>4} {'calls':>5} {'wall ms':>7}",
    ]
    for r in first:
        best = "-" if r["best"] is None else f"{r['best']:.2f}"
        release = "-" if r["release"] is None else f"{r['release']:.2f}"
        lines.append(
            f"{r['step']:>4} {r['served']:>6} {r['score']:>5.2f}  {r['verdict']:<9} {r['published']:>5} "
            f"{best:>8} {release:>7} {r['tried']:>5} {r['accepted']:>4} {r['calls']:>5} {r['ms']:>7.1f}"
        )
    lines += [
        "score: the user's mean on the served release (1 = both wishes met); val best: the archive's best "
        "mean over the held-out sessions, against the release's (a tie with itself)",
        "",
        f"mean score per round over {seeds} seed(s):",
    ]
    for arm, runs in curves.items():
        curve = [statistics.mean(run[i] for run in runs) for i in range(STEPS)]
        lines.append(f"  {arm:<12} " + " ".join(f"{x:.2f}" for x in curve))
    lines += [f"whole bench {time.monotonic() - started:.1f} s", SIMULATION]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=60, help="add seeds while they fit (at least one)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    print("\n".join(run(args.seconds)))


if __name__ == "__main__":
    main()
