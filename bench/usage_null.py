"""The null-steps part of ``bench/usage.py``: does error spending keep false passes rare?

N usage steps whose candidates are no better than the release, each gated by the real
``replay.gate`` on 10 held-out sessions (replay-max-calls 40) with :class:`CoinModel`, whose
answers are fixed strings and whose pairwise judge flips a fair coin per order.
:func:`run_null` prints P(some gate of the N passes falsely), simulated and exact (the
multinomial of wins, losses and ties), BEFORE (every gate at ``1 - confidence``) and AFTER
(each gate's level from ``spending.py``), and returns what missed its target.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.usage_sim import TASKS  # noqa: E402
from recipes.reefine import spending  # noqa: E402
from recipes.reefine.replay import CALLS_PER_SESSION, PAIRWISE_SYSTEM, ReplayCase, gate, sign_test  # noqa: E402
from reef_core.learning.model import ModelCall, ModelCaller  # noqa: E402

NULL_CONFIDENCES = (0.9, 0.8)
NULL_SESSIONS = 10  # held-out sessions per gate
NULL_MAX_CALLS = 40  # replay-max-calls: 4 calls per session, so all 10 fit
NULL_FIT = min(NULL_SESSIONS, NULL_MAX_CALLS // CALLS_PER_SESSION)
NULL_CASES = [
    ReplayCase(f"held-{i}", "", [{"role": "user", "content": TASKS[i % len(TASKS)]}], "run the tests")
    for i in range(NULL_SESSIONS)
]


@dataclass
class CoinModel(ModelCaller):
    """A ``ModelCaller`` for a candidate no better than the release: one fixed answer per side,
    and a pairwise judge that flips a fair coin for each order (so a session is a win 1/4, a
    loss 1/4 and a tie 1/2 of the time)."""

    rng: random.Random

    def answer(self, call: ModelCall) -> str:
        if call.system == PAIRWISE_SYSTEM:
            return json.dumps({"better": self.rng.choice("12"), "reason": "a coin"})
        return f"Changed what was asked ({call.system} harness). Done."


def null_run(confidence: float, steps: int, spend: bool, rng: random.Random) -> tuple[int, int]:
    """``steps`` usage steps, each gating a candidate no better than the release with the real
    ``replay.gate``; returns the false passes and the gates that ran a test.  ``spend``: the
    levels come from ``spending.py``; else every gate tests at ``1 - confidence`` (as before)."""
    alpha = 1 - confidence
    model = CoinModel(rng)
    history: list[spending.Spent] = []
    passes = tests = 0
    for _ in range(steps):
        index, level = spending.level(history, alpha) if spend else (0, alpha)
        passed, _, table = gate(
            model,
            NULL_CASES,
            render=lambda _case, side: side,
            confidence=confidence,
            level=level,
            max_calls=NULL_MAX_CALLS,
        )
        if table["tested"]:
            tests += 1
            if spend:
                history.append(spending.Spent(index, level, passed))
        passes += passed
    return passes, tests


def null_pass_chance(level: float, sessions: int = NULL_SESSIONS) -> Fraction:
    """Exactly, the chance that one gate at ``level`` passes a candidate no better (the coin judge)."""
    chance = Fraction(0)
    for wins in range(sessions + 1):
        for losses in range(sessions + 1 - wins):
            if wins > losses and wins + losses >= spending.sessions_needed(level):
                if sign_test(wins, losses) <= level:
                    ways = math.comb(sessions, wins) * math.comb(sessions - wins, losses)
                    chance += (
                        ways
                        * Fraction(1, 4) ** (wins + losses)
                        * Fraction(1, 2) ** (sessions - wins - losses)
                    )
    return chance


def null_exact(confidence: float, steps: int, spend: bool) -> float:
    """Exactly, P(some gate of ``steps`` passes).  Until the first pass every test failed, so the
    levels along that one path (the gates that can run a test) decide it."""
    alpha = 1 - confidence
    history: list[spending.Spent] = []
    none = Fraction(1)
    for _ in range(steps):
        index, level = spending.level(history, alpha) if spend else (0, alpha)
        if spending.sessions_needed(level) > NULL_FIT:
            continue  # the gate runs no test: nothing spent
        none *= 1 - null_pass_chance(level)
        if spend:
            history.append(spending.Spent(index, level, False))
    return float(1 - none)


def run_null(steps: int, runs: int) -> list[str]:
    """Print the false-pass rates over ``steps`` null gates, before and after error spending;
    returns the failures (a rate above its target, or the simulation off the exact value)."""
    print(
        f"\nNULL STEPS: {steps} usage steps whose candidates are no better than the release (a judge "
        f"flipping a fair coin per order;\n  answers fixed), {NULL_SESSIONS} held-out sessions per gate "
        f"(replay-max-calls {NULL_MAX_CALLS}), the real replay.gate, {runs} seeded runs per row"
    )
    print(
        f"\n{'confidence':>10}  {'levels':<26} {'P(any false pass)':>17} {'simulated (95%)':>18} "
        f"{'false passes':>12} {'tests':>6}  target"
    )
    failures: list[str] = []
    started = time.perf_counter()
    rows = [(confidence, spend) for confidence in NULL_CONFIDENCES for spend in (False, True)]
    for row, (confidence, spend) in enumerate(rows):
        alpha = 1 - confidence
        exact = null_exact(confidence, steps, spend)
        # seeded: run r of row k uses seed k * runs + r, so no two runs share their coins
        results = [null_run(confidence, steps, spend, random.Random(row * runs + run)) for run in range(runs)]
        rate = sum(passes > 0 for passes, _ in results) / runs
        half = 1.96 * math.sqrt(max(rate * (1 - rate), 1 / runs) / runs)
        label = "after: spending.py" if spend else f"before: every gate at {alpha:.2f}"
        target = ""
        if spend:
            target = f"<= {alpha:.2f} " + ("ok" if max(exact, rate) <= alpha else "MISSED")
            if max(exact, rate) > alpha:
                failures.append(
                    f"confidence {confidence:g}: {steps} null steps pass falsely {rate:.4f} of the time "
                    f"(exactly {exact:.4f}), above {alpha:.2f}"
                )
        print(
            f"{confidence:>10g}  {label:<26} {exact:>17.4f} {rate:>10.4f} ± {half:.4f} "
            f"{statistics.mean(p for p, _ in results):>12.3f} {statistics.mean(t for _, t in results):>6.1f}"
            f"  {target}"
        )
        slack = 4 * math.sqrt(exact * (1 - exact) / runs) + 1 / runs
        if abs(rate - exact) > slack:
            failures.append(
                f"confidence {confidence:g} ({label}): the simulation's {rate:.4f} is off the exact "
                f"{exact:.4f} by more than {slack:.4f}"
            )
    print(
        "P(any false pass): that some gate of the run passes a candidate that is no better, exactly "
        "(the binomial with ties)\n  and as simulated; false passes and tests: means per run (tests: "
        f"the gates that ran a sign test); {time.perf_counter() - started:.1f} s"
    )
    one = ", ".join(f"{float(null_pass_chance(1 - c)):.4f} at {c:g}" for c in NULL_CONFIDENCES)
    print(f"one gate at the fixed level passes falsely (exact): {one}")
    for confidence in NULL_CONFIDENCES:
        history: list[spending.Spent] = []
        while spending.sessions_needed(at := spending.level(history, 1 - confidence)[1]) <= NULL_FIT:
            history.append(spending.Spent(len(history) + 1, at, False))
        print(
            f"after spending at {confidence:g}: once the first {len(history)} tests failed, no gate runs "
            f"a test with {NULL_FIT} sessions (the next needs {spending.sessions_needed(at)})"
        )
    print("\nsessions the first gates need (all decisive, all won), and their levels:")
    for confidence in NULL_CONFIDENCES:
        print(f"  {confidence:g}, every earlier test failed: " + _needs(confidence, False, 10))
    print("  0.9, every earlier test passed: " + _needs(0.9, True, 4))
    print(
        f"  before: every gate needed {spending.sessions_needed(1 - 0.9)} at 0.9 and "
        f"{spending.sessions_needed(1 - 0.8)} at 0.8"
    )
    return failures


def _needs(confidence: float, passed: bool, count: int) -> str:
    history: list[spending.Spent] = []
    cells = []
    for _ in range(count):
        index, level = spending.level(history, 1 - confidence)
        cells.append(f"{spending.sessions_needed(level)} ({level:.4f})")
        history.append(spending.Spent(index, level, passed))
    return ", ".join(cells)
