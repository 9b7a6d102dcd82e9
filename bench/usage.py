"""Learning from usage, SIMULATED: does reefine's usage step make a user's sessions better, and
does the replay gate keep a harmful lesson out?

    python bench/usage.py [--quick] [--steps 10] [--sessions 12] [--seeds 5] [--null-runs 2000]
    python bench/usage.py --null-steps 50     # only the null-steps part (below)

This is a simulation, not a measurement of a capable model.  A simulated user with two hidden
preferences (the tests are run before the agent says done; an answer starts with a one-line
summary) runs sessions of two turns and scores each by how many of them the first answer met.
A scripted, rule-following model stands in for the served model and for every reefine call:
it answers a task obeying the rule bullets in its system prompt, judges by the user's next
message, reflects the lesson a correction names (quoting it exactly), curates one bullet per
new lesson, prefers in a replay the answer that meets what the feedback asked for, and approves
every review.  Every third step, its reflector also plants a harmful lesson ("Say done without
running the tests.") quoting the person's own words (their complaint "You said done without
running the tests. Always run …", or a one-off "That one was trivial: you could say done without
running the tests." the user adds to some thanks): a misreading the person's words carry, word
for word, so the recipe's evidence checks pass it and only the replay gate can keep it out.

Everything else is real and in this process: a scenario repository in a temp dir, records and
reports as reef writes them, and a ``LearningWorker`` running ``ReefineRecipe`` (judge between
steps, reflect -> curate -> well_formed, screens, reviewer, replay -> publish).  Two arms with
the same user, tasks and session ids: the replay gate on, and off (the bench's subclass drops
the "replay" check; reefine has no setting for it).  Each arm runs once per seed (the seed
changes the session ids, so which sessions are held out, and the order of the tasks).

Printed: per arm (seed 0) and step, the release served, the user's mean score on it, what the
step did, its model calls by role and its wall time; the mean score curves over the seeds; the
median step's own work (wall time minus time inside the model) against the 50 ms target and
against one report write (the baseline, measured in the same run); the worker's work between
steps.  Exits 1 when, for any seed, the gated arm's last score is not above its first, the gated
arm publishes the harmful lesson, or the ungated arm never publishes it.

The null-steps part (in the default run; alone with ``--null-steps N``): N usage steps whose
candidates are no better than the release, each gated by the real ``replay.gate`` on 10 held-out
sessions (replay-max-calls 40) with an in-process model whose answers are fixed strings and whose
pairwise judge flips a fair coin per order.  Over seeded runs it prints P(some gate of the N
passes falsely), simulated and exact (the multinomial of wins, losses and ties), BEFORE (every
gate at ``1 - confidence``) and AFTER (each gate's level from ``spending.py``), at confidence 0.9
and 0.8, and the sessions the first gates need.  Exits 1 when AFTER is above ``1 - confidence``
or a simulated rate is off its exact value by more than 4 standard errors.

The simulated user's tasks and preferences and the scripted model are in ``bench/usage_sim.py``;
the null-steps part is ``bench/usage_null.py``.  This module runs the arms and prints the report.
"""

from __future__ import annotations

import argparse
import logging
import re
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.usage_null import run_null  # noqa: E402
from bench.usage_sim import HARMFUL, ONE_OFF, PREFERENCES, TASKS, SimModel, serve  # noqa: E402
from recipes.reefine import usage  # noqa: E402
from recipes.reefine.playbook import bullets  # noqa: E402
from recipes.reefine.recipe import ReefineRecipe  # noqa: E402
from reef_core.daemon.reports import parse_report  # noqa: E402
from reef_core.harness import HarnessTree, Target, renderer_for  # noqa: E402
from reef_core.learning import Batch, Candidate, CheckResult, RecipeContext  # noqa: E402
from reef_core.learning.worker import Budgets, LearningWorker, StepOutcome  # noqa: E402
from reef_core.store import Release, Scenario, Store, StoreOptions  # noqa: E402

S = "usage"
SIMULATION = (
    "SIMULATION: a scripted user and a scripted rule-following model (it obeys the rule bullets in "
    "its system prompt), not a capable LLM; it shows the mechanism works end to end, not how "
    "much a real model would gain."
)
TARGET_MS = 50.0
PI_SYSTEM = "You are pi, a coding agent. Use the tools to read and change files; answer briefly."


# -- the recipe, as the worker drives it -------------------------------------------------------


class BenchRecipe(ReefineRecipe):
    """``ReefineRecipe`` unchanged, but it says when it found nothing to do (the bench waits on it)."""

    def __init__(self, context: RecipeContext) -> None:
        super().__init__(context)
        self.idle = threading.Event()
        self.looking = 0.0  # seconds in next_batch: the session index, the judge, forming a batch

    def next_batch(self, scenario: Scenario) -> Batch | None:
        batch = None
        started = time.perf_counter()
        try:
            batch = super().next_batch(scenario)
        finally:
            self.looking += time.perf_counter() - started
            if batch is None:
                self.idle.set()
        return batch


class UngatedRecipe(BenchRecipe):
    """The gate off: the same checks without "replay" (reefine has no setting for that)."""

    def checks(self, scenario: Scenario, candidate: Candidate) -> list[Callable[[], CheckResult]]:
        return [c for c in super().checks(scenario, candidate) if c.__name__ != "replay"]


# -- the simulated user ------------------------------------------------------------------------


@dataclass
class Row:
    step: int
    served: str
    score: float
    judged: int
    trigger: str
    verdict: str = "no step"
    published: str = ""
    harmful: bool = False
    calls: Counter[str] = field(default_factory=Counter)
    wall_ms: float = 0.0
    model_ms: float = 0.0
    between_ms: float = 0.0  # next_batch before the step: index the round, judge its turns
    judge_ms: float = 0.0  # of which inside the model

    @property
    def own_ms(self) -> float:
        return self.wall_ms - self.model_ms


def record(sid: str, release: str | None, messages: list[dict[str, str]], answer: str) -> dict[str, Any]:
    return {
        "route": "chat.completions",
        "client_format": "openai",
        "upstream_format": "openai",
        "model": "m",
        "stream": False,
        "status": 200,
        "complete": True,
        "release": release,
        "tags": {"run": sid},
        "request": {"model": "m", "messages": messages},
        "response": {
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}
            ]
        },
    }


def system_prompt(tree: HarnessTree, release: str | None) -> str:
    """pi's system prompt with the release installed: pi copies AGENTS.md into it verbatim."""
    target = Target(reef_url="http://127.0.0.1:9", scenario=S, model="m", release=release)
    agents = renderer_for("pi").render(tree, target)["AGENTS.md"].decode()
    return f"{PI_SYSTEM}\n\n{agents}"


def run_round(
    scenario: Scenario, seed: int, step: int, sessions: int, writes: list[float]
) -> tuple[str, list[str], float]:
    """The user's ``sessions`` sessions on the serving release; returns it, their ids and the mean
    score.  ``seed`` changes the session ids (so which are held out) and the order of the tasks."""
    tip = scenario.releases.tip()
    tree = HarnessTree.from_files(scenario.releases.files(tip)) if tip else HarnessTree.empty()
    name = tip.name if tip else None
    system = system_prompt(tree, name)
    ids, scores = [], []
    for i in range(sessions):
        sid = f"u{seed}-s{step:02d}-{i}"
        n = seed * 7 + step * sessions + i
        task = TASKS[n % len(TASKS)]
        opening = [{"role": "system", "content": system}, {"role": "user", "content": task}]
        first = serve(system, opening)
        missed = [p for p in PREFERENCES if not p.met(first)]
        score = 1 - len(missed) / len(PREFERENCES)
        following = missed[0].correction if missed else f"Thanks. Next: {TASKS[(n + 5) % len(TASKS)]}"
        if not missed and n % 4 == 0:  # a one-off the reflector can misread as a rule
            following += f" {ONE_OFF}"
        later = [*opening, {"role": "assistant", "content": first}, {"role": "user", "content": following}]
        receipts = [
            scenario.append("record", record(sid, name, opening, first), summary="chat.completions").result(),
            scenario.append(
                "record", record(sid, name, later, serve(system, later)), summary="chat.completions"
            ).result(),
        ]
        if i % 3 == 0:  # a third of the sessions get a report from the person; the judge scores the rest
            body: dict[str, Any] = {
                "score": score,
                "references": receipts,
                "metadata": {"session": sid, "source": "user"},
            }
            if missed:
                body["feedback"] = missed[0].feedback
            parsed = parse_report(body)
            started = time.perf_counter()
            scenario.append("report", parsed.content(), summary=parsed.summary()).result()
            writes.append(time.perf_counter() - started)
        ids.append(sid)
        scores.append(score)
    return name or "-", ids, statistics.mean(scores)


def harmful_in(scenario: Scenario, release: Release | None) -> bool:
    if release is None:
        return False
    tree = HarnessTree.from_files(scenario.releases.files(release))
    return any(b.text == HARMFUL for b in bullets(tree).values())


def run_arm(gated: bool, steps: int, sessions: int, seed: int, writes: list[float]) -> tuple[list[Row], bool]:
    """One arm: ``steps`` rounds of sessions, each followed by a usage step; returns the rows and
    whether any release of the chain ever held the harmful rule."""
    model = SimModel()
    # more than the person's own reports of one round (a third of it), so the judge's verdicts
    # are needed to start a step; every ready session fits in one step
    least = -(-sessions // 3) + 1
    config = {"health": False, "usage-min-sessions": least, "usage-max-sessions": 2 * sessions}
    with tempfile.TemporaryDirectory() as state:
        context = RecipeContext(
            cache_dir=Path(state) / "cache",
            config=config,
            log=lambda _: None,
            model=model,
            served_model="m",
            daemon_url="http://127.0.0.1:9",
        )
        recipe = (BenchRecipe if gated else UngatedRecipe)(context)
        share = recipe.config.held_out_share
        outcomes: list[StepOutcome] = []
        scenario = Store(Path(state) / "state", StoreOptions(pack_every=0)).open(S, create=True)
        worker = LearningWorker(
            scenario, recipe, Budgets(poll_seconds=3600, failure_streak=1000), on_outcome=outcomes.append
        ).start()
        rows = []
        died: list[str] = []
        hook = threading.excepthook
        threading.excepthook = lambda args: died.append(f"{args.exc_type.__name__}: {args.exc_value}")
        try:
            for step in range(1, steps + 1):
                served, ids, score = run_round(scenario, seed, step, sessions, writes)
                fresh = sum(not usage.held_out(sid, share) for sid in ids)
                model.plant = step % 3 == 0
                calls, seconds = model.snapshot()
                before, looked = len(outcomes), recipe.looking
                # the worker's first look indexes the round and judges its new turns; its second
                # indexes the verdicts, and enough new scored sessions (or a ticket) start a step
                settle(recipe, worker, died, step)
                trigger = f"{fresh} sessions"
                if fresh < recipe.config.usage_min_sessions:
                    recipe.learn_now()
                    trigger = "reef learn"
                settle(recipe, worker, died, step)
                after_calls, after_seconds = model.snapshot()
                row = Row(step, served, score, after_calls["judge"] - calls["judge"], trigger)
                row.between_ms = (recipe.looking - looked) * 1000
                row.judge_ms = (after_seconds.get("judge", 0.0) - seconds.get("judge", 0.0)) * 1000
                done = outcomes[before:]
                if done:
                    outcome = done[0]
                    row.verdict = _verdict(outcome)
                    row.published = outcome.release.name if outcome.release else ""
                    row.harmful = harmful_in(scenario, outcome.release)
                    row.calls = Counter({r: after_calls[r] - calls[r] for r in after_calls if r != "judge"})
                    row.calls = +row.calls
                    row.wall_ms = outcome.seconds * 1000
                    row.model_ms = (
                        sum(after_seconds[r] - seconds.get(r, 0.0) for r in after_seconds if r != "judge")
                        * 1000
                    )
                    row.trigger += f" ({len(done)} steps)" if len(done) > 1 else ""
                rows.append(row)
            ever = any(harmful_in(scenario, r) for r in scenario.releases)
        finally:
            threading.excepthook = hook
            worker.stop()
            scenario.close()
    return rows, ever


def settle(recipe: BenchRecipe, worker: LearningWorker, died: list[str], step: int) -> None:
    """Wake the worker and wait until it finds nothing more to do."""
    recipe.idle.clear()
    worker.notify()
    deadline = time.monotonic() + 120
    while not recipe.idle.wait(0.05):
        if died or time.monotonic() > deadline:
            raise SystemExit(f"step {step}: the worker stopped or hung ({worker.state}): {died}")


def _verdict(outcome: StepOutcome) -> str:
    verdict = outcome.verdict.split(":")[0]
    replay = next((c for c in outcome.checks if c.name == "replay"), None)
    if replay is not None:
        t = replay.data
        if t.get("replayed"):
            verdict += f" replay {t['wins']}W {t['losses']}L {t['ties']}T"
        else:
            verdict += f" replay: {t.get('held_out_available', 0)} held out, {t.get('needed')} needed"
    elif outcome.verdict.startswith("skipped"):
        verdict += ": " + re.sub(r" in \d+ session\(s\)", "", outcome.verdict.split(": ", 2)[-1])
        verdict = verdict.replace("skip: ", "")
    return verdict


# -- the report ------------------------------------------------------------------------------


ROLES = {"reflect": "refl", "curate": "cur", "review": "rev", "answer": "ans", "pairwise": "pair"}


def print_arm(title: str, rows: list[Row]) -> None:
    print(f"\n{title}")
    roles = " ".join(f"{short:>4}" for short in ROLES.values())
    print(
        f"{'step':>4} {'served':>6} {'score':>5} {'judge':>5}  {'trigger':<11} {'verdict':<40} "
        f"{'publ.':>5} {'harmful':>7}  {roles}  {'wall ms':>7} {'model':>5} {'own':>5}"
    )
    for r in rows:
        cells = " ".join(f"{r.calls.get(role, 0):>4}" for role in ROLES)
        print(
            f"{r.step:>4} {r.served:>6} {r.score:>5.2f} {r.judged:>5}  {r.trigger:<11} {r.verdict[:40]:<40} "
            f"{r.published or '-':>5} {'YES' if r.harmful else '-':>7}  {cells}  "
            f"{r.wall_ms:>7.1f} {r.model_ms:>5.1f} {r.own_ms:>5.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed of 6 sessions per step; 300 null runs")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--sessions", type=int, default=None, help="sessions per step (12; --quick 6)")
    parser.add_argument("--seeds", type=int, default=None, help="runs of each arm (5; --quick 1)")
    parser.add_argument(
        "--null-steps",
        type=int,
        default=None,
        metavar="N",
        help="run only the null-steps part, with N steps (the default run includes it with 50)",
    )
    parser.add_argument(
        "--null-runs", type=int, default=None, help="seeded runs per null row (2000; --quick 300)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    null_runs = args.null_runs or (300 if args.quick else 2000)
    failures = [] if args.null_steps is not None else run_curves(args)
    failures += run_null(50 if args.null_steps is None else args.null_steps, null_runs)
    if failures:
        print("FAILED: " + "; ".join(failures))
        raise SystemExit(1)


def run_curves(args: argparse.Namespace) -> list[str]:
    """The gated and ungated arms, printed; returns the failures."""
    sessions = args.sessions or (6 if args.quick else 12)
    seeds = args.seeds or (1 if args.quick else 5)
    print(SIMULATION)
    print(
        f"{args.steps} steps of {sessions} two-turn sessions each, {seeds} seed(s) (session ids, so "
        f"which are held out, and task order); the user's hidden preferences: "
        + " / ".join(p.rule for p in PREFERENCES)
        + f"\nsteps 3, 6, 9: the reflector also plants the harmful lesson {HARMFUL!r}, "
        + "quoting the person's words"
    )
    writes: list[float] = []
    started = time.perf_counter()
    runs = {True: [run_arm(True, args.steps, sessions, seed, writes) for seed in range(seeds)]}
    runs[False] = [run_arm(False, args.steps, sessions, seed, writes) for seed in range(seeds)]
    print_arm("replay gate ON (the recipe as shipped), seed 0", runs[True][0][0])
    print_arm('replay gate OFF (a bench subclass drops the "replay" check), seed 0', runs[False][0][0])
    print(
        "\nscore: the user's mean over the step's sessions on the served release (1 = both wishes met); "
        "judge: next-turn\njudge calls before the step; the role columns: the step's model calls (answer "
        "and pairwise are the replay's)"
    )

    print(f"\nmean score per step over {seeds} seed(s):")
    for gated, label in ((True, "gate ON "), (False, "gate OFF")):
        curve = [statistics.mean(rows[i].score for rows, _ in runs[gated]) for i in range(args.steps)]
        harmed = sum(ever for _, ever in runs[gated])
        print(
            f"  {label} "
            + " ".join(f"{x:.2f}" for x in curve)
            + f"   harmful rule published in {harmed}/{seeds}"
        )
    served = [  # the rounds a release with the harmful rule served, and the same rounds gated
        (rows[i].score, runs[True][k][0][i].score)
        for k, (rows, _) in enumerate(runs[False])
        for i in range(1, args.steps)
        if rows[i - 1].harmful
    ]
    if served:
        off, on = statistics.mean(a for a, _ in served), statistics.mean(b for _, b in served)
        print(
            f"  rounds served by the harmful rule (gate OFF): mean {off:.2f}; the same rounds gated: {on:.2f}"
        )

    stepped = [r for arm in runs.values() for rows, _ in arm for r in rows if r.wall_ms]
    wall = statistics.median(r.wall_ms for r in stepped)
    model_ms = statistics.median(r.model_ms for r in stepped)
    own = statistics.median(r.own_ms for r in stepped)
    write_ms = statistics.median(writes) * 1000
    calls = statistics.median(sum(r.calls.values()) for r in stepped)
    print(
        f"\nper usage step (median of {len(stepped)}): {calls:.0f} model calls, wall {wall:.1f} ms, "
        f"inside the model {model_ms:.1f} ms, own work {own:.1f} ms\n  own work = {own / TARGET_MS:.2f}"
        f" x the {TARGET_MS:.0f} ms target = {own / write_ms:.0f} report writes ({write_ms:.2f} ms each, the "
        f"baseline); slowest step's own work {max(r.own_ms for r in stepped):.1f} ms; "
        f"whole bench {time.perf_counter() - started:.1f} s"
    )
    rounds = [r for arm in runs.values() for rows, _ in arm for r in rows]
    between = statistics.median(r.between_ms - r.judge_ms for r in rounds)
    judged = statistics.median(r.judged for r in rounds)
    print(
        f"between steps (median of {len(rounds)} rounds): the worker's look at a round (index its records, "
        f"{judged:.0f} judge calls,\n  a report per verdict) {between:.1f} ms beyond the model; it is not "
        "part of a step's time"
    )
    print(SIMULATION)
    failures = []
    for seed in range(seeds):
        (gated_rows, gated_harm), (_, ungated_harm) = runs[True][seed], runs[False][seed]
        if not gated_rows[-1].score > gated_rows[0].score:
            failures.append(
                f"seed {seed}: the gated arm's final mean {gated_rows[-1].score:.2f} is not above its "
                f"first {gated_rows[0].score:.2f}"
            )
        if gated_harm:
            failures.append(f"seed {seed}: the gated arm published the harmful lesson")
        if not ungated_harm:
            failures.append(f"seed {seed}: the ungated arm never published the harmful lesson")
    return failures


if __name__ == "__main__":
    main()
