"""What the canary's sequential test saves against a fixed-size A/B test, and what it risks.

    python bench/canary.py [--runs 1000] [--share 0.5] [--seed 1] [--quick]

Simulated canaries: each new session lands on the canary with probability ``--share``, else on
control, and gets one score: /good or /bad (``good/bad``: 1 with probability 0.5 on control,
the noisiest scores there are) or a judge's verdict (``judge``: accept 1, correct 0.25, reject
0 with probabilities 0.4, 0.25, 0.35 on control).  The canary's scores are shifted by a true
difference of +effect, +2·effect, -effect or 0 (mass moved between 1 and 0).  After every
session the test of ``reef_core/release/sequential.py`` decides, with the default
:class:`Design`, exactly as the daemon runs it.

The baseline, measured on the same sessions in the same run: the two-sided fixed-size z-test at
the same alpha, sized by :func:`fixed_sample_size` for power 0.8 at ``effect`` with standard
deviation 0.5 (what must be assumed before any score is seen), run once on its planned sessions.

Printed, per case: how often each test promoted and retired, the sessions (both arms together)
until the sequential test ended (decided, or expired at ``max_sessions``: an equal canary runs
there by design, no futility stop), mean and median, and their ratio to the fixed test's
sessions; the target is 30% fewer (ratio 0.70 or below).  ``sd`` is the scores' standard
deviation in that case (the two arms' variances averaged), and ``mean/fixed@sd`` the mean
against a fixed test sized at it, which no one knows in advance: what is left of the saving
once the sequential test's use of the observed variance is taken out.  Then the false-promote
rate (equal and worse canaries promoted) and the false-retire rate (equal and better ones
retired), with the target of at most alpha; the exit status is 1 when either misses it.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reef_core.release.sequential import Arm, Design, decide_arms, fixed_sample_size

Draw = Callable[[random.Random], float]


def good_bad(p: float) -> Draw:
    return lambda rng: 1.0 if rng.random() < p else 0.0


def judge(accept: float, correct: float, reject: float) -> Draw:
    return lambda rng: (lambda u: 1.0 if u < accept else 0.25 if u < accept + correct else 0.0)(rng.random())


#: per kind of score: the control's draw, the canary's at a true difference, the variance at it
KINDS: dict[str, tuple[Callable[[float], Draw], Callable[[float], float]]] = {
    "good/bad": (lambda d: good_bad(0.5 + d), lambda d: (0.5 + d) * (0.5 - d)),
    "judge": (
        lambda d: judge(0.4 + d, 0.25, 0.35 - d),
        lambda d: (0.4 + d + 0.25 / 16) - (0.4 + d + 0.25 / 4) ** 2,
    ),
}


@dataclass
class Tally:
    promoted: int = 0
    retired: int = 0
    expired: int = 0
    fixed_promoted: int = 0
    fixed_retired: int = 0
    sessions: list[int] = field(default_factory=list)  # until the sequential test ended, per canary


def fixed_test(control: list[float], canary: list[float], z: float) -> str:
    """The fixed-size z-test on its planned sessions: ``promote``, ``retire`` or ``none``."""
    c, t = Arm.of(control), Arm.of(canary)
    se = math.sqrt(c.variance / c.n + t.variance / t.n) or 1e-12
    score = (t.mean - c.mean) / se
    return "promote" if score >= z else "retire" if score <= -z else "none"


def fixed_plan(design: Design, share: float, sd: float = 0.5) -> tuple[int, int]:
    """The fixed test's sessions (control, canary) at ``share``: as much information as
    :func:`fixed_sample_size`'s per arm on an even split (``1/n_control + 1/n_canary = 2/n``)."""
    total = fixed_sample_size(design, sigma=sd) / 2 * (1 / share + 1 / (1 - share))
    return math.ceil((1 - share) * total), math.ceil(share * total)


def simulate(kind: str, diff: float, runs: int, share: float, design: Design, rng: random.Random) -> Tally:
    control_of, _ = KINDS[kind]
    draw_control, draw_canary = control_of(0.0), control_of(diff)
    need_control, need_canary = fixed_plan(design, share)
    z = statistics.NormalDist().inv_cdf(1 - design.alpha / 2)
    tally = Tally()
    for _ in range(runs):
        control, canary = Arm(), Arm()
        scores: dict[str, list[float]] = {"control": [], "canary": []}
        ended, sessions = False, 0
        while not ended or len(scores["canary"]) < need_canary or len(scores["control"]) < need_control:
            sessions += 1
            arm = "canary" if rng.random() < share else "control"
            score = (draw_canary if arm == "canary" else draw_control)(rng)
            scores[arm].append(score)
            if ended:
                continue
            if arm == "canary":
                canary = canary.add(score)
            else:
                control = control.add(score)
            state = decide_arms(control, canary, design).state
            if state != "running":
                ended = True
                tally.sessions.append(sessions)
                tally.promoted += state == "promote"
                tally.retired += state == "retire"
                tally.expired += state == "expired"
        verdict = fixed_test(scores["control"][:need_control], scores["canary"][:need_canary], z)
        tally.fixed_promoted += verdict == "promote"
        tally.fixed_retired += verdict == "retire"
    return tally


def rate(count: int, runs: int) -> str:
    return f"{count / runs:.3f} ({count}/{runs})"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=1000, help="simulated canaries a case")
    parser.add_argument("--share", type=float, default=0.5, help="the canary's share of new sessions")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="100 canaries a case (1,000 without)")
    args = parser.parse_args()
    if args.quick:
        args.runs = 100
    if not 0 < args.share < 1:
        parser.error("--share must be above 0 and below 1")
    design = Design()
    n = fixed_sample_size(design)
    fixed_sessions = sum(fixed_plan(design, args.share))
    e = design.effect
    print(
        f"design: alpha {design.alpha} (two-sided: at most {design.alpha / 2:g} each way), effect {e}, "
        f"min {design.min_sessions} and max {design.max_sessions} sessions per arm; canary share "
        f"{args.share}; {args.runs} canaries a case"
    )
    print(
        f"baseline: the fixed-size two-sided z-test at alpha {design.alpha}, power 0.8 at {e} with sd 0.5: "
        f"{n} sessions per arm at an even share; {fixed_sessions} in all at this share"
    )
    print()
    head = f"{'scores':<9} {'diff':>6} {'sd':>5}  {'test':<10} {'promoted':>8} {'retired':>8} {'expired':>8}"
    ratios_head = f"{'mean/fixed':>10} {'median/fixed':>12} {'mean/fixed@sd':>13}"
    print(f"{head} {'mean':>6} {'median':>6} {ratios_head}  30% fewer")
    started = time.perf_counter()
    results: dict[tuple[str, float], Tally] = {}
    saving: dict[str, list[str]] = {"yes": [], "mean only": [], "no": []}
    for k, kind in enumerate(KINDS):
        for d, diff in enumerate((e, 2 * e, -e, 0.0)):
            rng = random.Random(args.seed * 1_000_003 + k * 101 + d)
            tally = results[kind, diff] = simulate(kind, diff, args.runs, args.share, design, rng)
            variance = KINDS[kind][1]
            sd = math.sqrt((variance(0.0) + variance(diff)) / 2)
            mean, median = statistics.fmean(tally.sessions), statistics.median(tally.sessions)
            ratios = mean / fixed_sessions, median / fixed_sessions
            oracle = mean / sum(fixed_plan(design, args.share, sd))
            if diff == 0:
                verdict = "- (equal: runs to max_sessions by design)"
            else:
                verdict = "yes" if max(ratios) <= 0.70 else "mean only" if ratios[0] <= 0.70 else "no"
                saving[verdict].append(f"{kind} {diff:+.2f}")
            shares = (tally.promoted, tally.retired, tally.expired)
            cells = " ".join(f"{count / args.runs:>8.3f}" for count in shares)
            print(
                f"{kind:<9} {diff:>+6.2f} {sd:>5.2f}  {'sequential':<10} {cells} {mean:>6.0f} {median:>6.0f} "
                f"{ratios[0]:>10.2f} {ratios[1]:>12.2f} {oracle:>13.2f}  {verdict}"
            )
            fixed = f"{tally.fixed_promoted / args.runs:>8.3f} {tally.fixed_retired / args.runs:>8.3f}"
            print(f"{'':<22}  {'fixed':<10} {fixed} {'-':>8} {fixed_sessions:>6} {fixed_sessions:>6}")
    print()
    print(
        f"30% fewer sessions: met (mean and median) for {', '.join(saving['yes']) or 'none'}; "
        f"for the mean only for {', '.join(saving['mean only']) or 'none'}; "
        f"not met for {', '.join(saving['no']) or 'none'}"
    )
    failed = False
    for what, cases, attr in (
        ("false promotes (equal and worse canaries promoted)", (0.0, -e), "promoted"),
        ("false retires (equal and better canaries retired)", (0.0, e), "retired"),
    ):
        parts, worst = [], 0.0
        for kind in KINDS:
            for diff in cases:
                tally = results[kind, diff]
                count, fixed = getattr(tally, attr), getattr(tally, f"fixed_{attr}")
                worst = max(worst, count / args.runs)
                parts.append(f"{kind} {diff:+.2f}: {rate(count, args.runs)}, fixed {fixed / args.runs:.3f}")
        ok = worst <= design.alpha
        failed |= not ok
        print(f"{what}, target at most {design.alpha}: {'met' if ok else 'NOT MET'}")
        print("  " + "; ".join(parts))
    print(f"({time.perf_counter() - started:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
