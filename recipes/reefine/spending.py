"""How much error each replay gate may spend: online family-wise error control for ``replay.py``.

Each usage step replays held-out sessions and passes its candidate on a one-sided sign test.
Testing every gate at ``alpha = 1 - replay-confidence`` makes each gate alone wrong at most
``alpha`` of the time, but the gates run again and again on the same held-out sessions: with
10 of them and a judge that flips a fair coin, one gate passes a candidate that is no better
3.4% of the time at confidence 0.9, and some gate of 50 does 82% of the time.  This module
spreads ``alpha`` over all the gates a learner will ever run instead, with the **online
fallback procedure** (Tian & Ramdas 2021, "Online control of the familywise error rate"):
the t-th gate that runs a test tests at

    level_t = gamma_t * alpha + (level_{t-1} if test t-1 passed else 0),   gamma_t = 1 / (t (t + 1))

**Why the sum bounds the family-wise error.**  ``gamma_t = 1/t - 1/(t + 1)`` telescopes:
``gamma_1 + ... + gamma_T = 1 - 1/(T + 1) < 1``.  When no candidate is better than the
release it was tested against, every test before the first pass failed, so the first pass,
if any, happens at some test t at level exactly ``gamma_t * alpha``; the sign test is valid
(ties and its discreteness only make it stricter), so that has probability at most
``gamma_t * alpha``, and the union bound over t gives P(any pass) <= ``alpha * sum(gamma_t)
< alpha``.  The union bound needs no independence: the bound holds when the gates replay the
same sessions with the same judge.  When some candidates really are better, their passes hand
their level on to the next test; Tian & Ramdas prove that this still bounds the probability of
passing any candidate that is no better by ``alpha`` (strong control, any dependence).

**What a user sees** (confidence 0.9, so alpha = 0.1).  An all-wins result over n decisive
sessions has sign-test p = 2**-n, so a test at level L needs ``sessions_needed(L) =
ceil(log2(1 / L))`` held-out sessions that all prefer the candidate.  The first gate tests at
0.1 / 2 = 0.05 and needs 5 (2**-5 = 0.031 <= 0.05 < 2**-4; the fixed 0.1 of before needs 4).  After
failures the levels shrink like ``alpha / t**2``, so the sessions needed grow by about two per
doubling of t: ``ceil(log2(t (t + 1) / alpha))``.

    test t, all earlier ones failed     1      2       3       4      5-6     7-9     10-13    14-19
    its level at 0.9 (first of a range) 0.05   0.0167  0.0083  0.005  0.0033  0.0018  0.00091  0.00048
    all-win sessions it needs           5      6       7       8      9       10      11       12

With ``replay-max-calls`` 40 (10 sessions per gate) a learner whose nine tests so far all
failed cannot run a tenth until the limit is raised (44 calls fit 11 sessions).  A pass carries
its level forward: after a pass at test 1 (0.05), test 2 runs at 0.05 + 0.0167 = 0.067 and
needs 4 sessions; a run of passes approaches ``alpha * t / (t + 1)``, the fixed level of before; one
failure drops the next test back to ``gamma_t * alpha``.

**What counts.**  Only a gate that runs a test spends: one with fewer held-out sessions within
``replay-max-calls`` than ``sessions_needed`` of its level spends nothing and does not move t
(that decision depends on how many sessions exist, never on the verdicts, so it costs the bound
nothing).  The history is counted per learner from its step records, oldest first; the replay
check (``checks.py``) reads it there and, when it picks the held-out sessions to replay, puts those a
passing gate already replayed last, so fresh evidence comes first.  That choice helps the tests'
power; the bound does not depend on it.

Pure functions, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Spent", "gamma", "level", "sessions_needed"]


@dataclass(frozen=True)
class Spent:
    """One earlier gate that ran a test: its index t (from 1), the level it tested at, the outcome."""

    index: int
    level: float
    passed: bool


def gamma(t: int) -> float:
    """The share of ``alpha`` the t-th test gets of its own: ``1 / (t (t + 1))``; they sum to 1."""
    if isinstance(t, bool) or not isinstance(t, int) or t < 1:
        raise ValueError(f"a test's index t must be an integer of at least 1, not {t!r}")
    return 1 / (t * (t + 1))


def level(history: Sequence[Spent], alpha: float) -> tuple[int, float]:
    """The index and level of the next test, after ``history`` (the earlier tests, in order).

    ``alpha`` is ``1 - replay-confidence``.  Only the last entry matters (the next test is the
    one after it, and a pass hands it its level), so only it is checked: it must be test
    ``len(history)``.  The level never exceeds ``alpha``: with one ``alpha`` throughout it cannot;
    the cap matters when ``replay-confidence`` was raised between gates and a pass would carry an
    older, larger level forward."""
    _check_share("alpha (1 - replay-confidence)", alpha)
    t = len(history) + 1
    if not history:
        return t, gamma(t) * alpha
    last = history[-1]
    if last.index != len(history):
        raise ValueError(
            f"the history's tests must be numbered 1, 2, 3, ... in order; the last of {len(history)} "
            f"is test {last.index!r}"
        )
    _check_share(f"test {last.index}'s level", last.level)
    carried = last.level if last.passed else 0.0
    return t, min(gamma(t) * alpha + carried, alpha)


def sessions_needed(level: float) -> int:
    """The fewest decisive sessions, all won, whose sign-test p (``2**-n``) is at most ``level``."""
    _check_share("a test's level", level)
    n = max(1, math.ceil(-math.log2(level)))
    while n > 1 and math.ldexp(1.0, 1 - n) <= level:  # log2 rounded up past an exact power of 2
        n -= 1
    while math.ldexp(1.0, -n) > level:
        n += 1
    return n


def _check_share(what: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise ValueError(f"{what} must be a number between 0 and 1 (both excluded), not {value!r}")
