"""The sequential test behind a canary release: after every scored session, promote the canary
(it scores better), retire it (it scores worse) or keep it running; at ``max_sessions`` canary
sessions an undecided canary expires, unpromoted.

**The rule.**  Two one-sided sequential probability ratio tests (Wald's SPRT) on the difference
in mean session score, ``d = canary mean - control mean``, each against the simple alternative
``±effect``.  With ``s²`` the variance of that difference (``v_control/n_control +
v_canary/n_canary``, below) and ``t = effect``::

    promote evidence   log Λ+ = (t·d - t²/2) / s²
    retire evidence    log Λ- = (-t·d - t²/2) / s²
    boundary           log(2/alpha)

The canary is promoted once ``log Λ+`` reaches the boundary, retired once ``log Λ-`` does, and
only after ``min_sessions`` on each arm.  There is no futility boundary: a canary that is no
better and no worse runs until its arm has ``max_sessions`` and ends ``expired``.

**Why it is always valid.**  ``S = d/s²`` on the information scale ``I = 1/s²`` is a Brownian
motion with drift ``true difference``, whichever arm each session lands on (the canonical joint
distribution of a two-arm comparison: Jennison & Turnbull, *Group Sequential Methods*, 2000).
So under a true difference of 0, ``Λ+ = exp(t·S - t²·I/2)`` is a nonnegative martingale with
mean 1 (a supermartingale when the canary is worse), and Ville's inequality bounds the chance
that it *ever* reaches ``2/alpha`` by ``alpha/2``, however often it is looked at.  That is what
``alpha`` bounds, exactly:

* a canary that is no better than control is promoted with probability at most ``alpha/2``;
* one that is no worse is retired with probability at most ``alpha/2``;
* an equal one ends with any decision at all with probability at most ``alpha`` (the same
  guarantee as the two-sided fixed-size z-test at ``alpha``, :func:`fixed_sample_size`);
* the interval ``d ± (t/2 + s²·log(2/alpha)/t)`` (the values of the difference neither test
  rejects) holds the true difference at every look at once with probability at least
  ``1 - alpha``: a confidence sequence.  Once both arms have ``min_sessions`` it excludes 0
  exactly when the test decides.

Scores are bounded, not Gaussian, and the variances are estimated, so the guarantee is
asymptotic; simulations check it (``tests/release/test_sequential.py``, ``bench/canary.py``).
With the defaults, over 2,000 simulated equal canaries per case (/good at 50%, 70% and 90%,
judge scores 1/0.25/0; canary shares 0.1 to 0.8) 0-2.3% were promoted and 0.1-2.0% retired,
and in 96-99.9% of runs, equal or 0.15 apart, the interval held the true difference at every
look until the canary ended.

**The variances.**  A small arm that happens to score uniformly (ten /good in a row: sample
variance 0) would read as near-certain, so each arm's sample variance is shrunk toward 1/4, the
largest a score in [0, 1] can have, by ten pseudo-sessions; and the smaller arm's is at least
the variance of all sessions together (what both arms share when they score alike, the case the
test must not mistake for a difference).  With plain sample variances, equal canaries scoring
/good 90% of the time on a 20% share were promoted 16% of the time; with these, 0.15%.

**Why not the mixture SPRT.**  The mSPRT (Johari et al., "Always valid inference") mixes the
alternative over a normal prior instead of fixing it at ``effect``.  On 8,000 simulated canaries
(/good at 50%, even share, the defaults, the same variances) 0.15 better than control, the SPRT
promoted 80% in 278 sessions on average, the mSPRT 70% in 307 (prior scale ``effect``) or 68% in
302 (``2·effect``); at 0.30 better all promote, in 101 sessions against 102 or 90.  What matters
most is the smallest difference worth having, and there the SPRT tuned to it gathers evidence
fastest: its log evidence grows by ``t²/4σ²`` per pair of sessions, more than any other
alternative's or mixture's.

**Defaults.**  ``effect`` 0.15 and ``max_sessions`` 230 give power 0.80 at a difference of 0.15
for the noisiest scores (/good at 50%, standard deviation 0.5) on an even share, 0.83 for /good
at 60% and 0.87 for judge scores; the fixed-size test needs 175 sessions per arm for 0.8.
Against it (``bench/canary.py``) the sequential test decides a canary 0.15 better or worse in
about 20% fewer sessions on average for /good-/bad scores (25% fewer at the median) and 30%
fewer for judge scores (40% at the median), one 0.30 better in about 70% fewer; an equal canary
uses all 230 by design.  Without a futility stop, 30% fewer at ``effect`` itself is out of reach for the
noisiest scores: the fifth of canaries not decided run to ``max_sessions``, and the others need
``log(2/alpha)`` of evidence at ``t²/4σ²`` a pair of sessions, about 164 per arm on average.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reef_core.errors import InvalidInput

__all__ = ["STATES", "Arm", "Decision", "Design", "decide", "decide_arms", "fixed_sample_size"]

#: what :func:`decide` can say
STATES = ("running", "promote", "retire", "expired")

_MOST_VARIANCE = 0.25  # the largest variance of a score in [0, 1] (half 0, half 1)
_PSEUDO_SESSIONS = 10  # how many sessions at that variance each estimate starts from


def _real(value: Any, field: str, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(f"{what} must be a number, not {value!r}", field=field)
    if not math.isfinite(value):
        raise InvalidInput(f"{what} must be a finite number, not {value!r}", field=field)
    return float(value)


def _whole(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{field} must be a whole number, not {value!r}", field=field)
    return value


def _require(ok: bool, field: str, rule: str, value: float) -> None:
    if not ok:
        raise InvalidInput(f"{field} must be {rule}, not {value}", field=field)


@dataclass(frozen=True)
class Design:
    """The test's settings, named as in ``recipe.config``."""

    #: the error rate stated to users: see the module docstring for exactly what it bounds
    alpha: float = 0.05
    #: the smallest difference in mean session score worth detecting; the test is tuned to it
    effect: float = 0.15
    #: sessions each arm needs before the test may decide
    min_sessions: int = 10
    #: canary sessions at which an undecided canary expires
    max_sessions: int = 230

    def __post_init__(self) -> None:
        alpha = _real(self.alpha, "canary-alpha", "canary-alpha")
        _require(0 < alpha < 0.5, "canary-alpha", "above 0 and below 0.5", alpha)
        effect = _real(self.effect, "canary-effect", "canary-effect")
        _require(0 < effect <= 1, "canary-effect", "above 0 and at most 1", effect)
        least = _whole(self.min_sessions, "canary-min-sessions")
        _require(least >= 1, "canary-min-sessions", "at least 1", least)
        most = _whole(self.max_sessions, "canary-max-sessions")
        _require(most >= least, "canary-max-sessions", f"at least canary-min-sessions ({least})", most)

    @property
    def threshold(self) -> float:
        """The boundary each one-sided test's log evidence must reach: ``log(2/alpha)``."""
        return math.log(2 / self.alpha)


def _score(value: Any, name: str, index: int | None = None) -> float:
    where = f"{name} score" if index is None else f"{name} score {index}"
    score = _real(value, name, where)
    if not 0 <= score <= 1:
        raise InvalidInput(f"{where} must be in [0, 1], not {score}", field=name)
    return score


@dataclass(frozen=True)
class Arm:
    """One arm's scored sessions, summarised: count, mean, sample variance (0 below two)."""

    n: int = 0
    mean: float = 0.0
    variance: float = 0.0

    @classmethod
    def of(cls, scores: Sequence[float], *, name: str = "scores") -> Arm:
        """The arm of ``scores``; a score that is not a finite number in [0, 1] raises
        InvalidInput naming ``name`` (``control`` or ``canary`` from :func:`decide`)."""
        values = [_score(value, name, i) for i, value in enumerate(scores)]
        if not values:
            return cls()
        mean = math.fsum(values) / len(values)
        squares = math.fsum((x - mean) ** 2 for x in values)
        return cls(len(values), mean, squares / (len(values) - 1) if len(values) > 1 else 0.0)

    def add(self, score: float, *, name: str = "scores") -> Arm:
        """This arm with one more session (Welford's update: what a running tally needs)."""
        x = _score(score, name)
        n = self.n + 1
        mean = min(1.0, max(0.0, self.mean + (x - self.mean) / n))
        squares = max(0.0, self.squares + (x - self.mean) * (x - mean))
        return Arm(n, mean, squares / (n - 1) if n > 1 else 0.0)

    @property
    def squares(self) -> float:
        """The sum of squared deviations from the mean."""
        return self.variance * (self.n - 1) if self.n > 1 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "mean": round(self.mean, 4), "variance": round(self.variance, 4)}


@dataclass(frozen=True)
class Decision:
    """What the test says now about a canary against its control."""

    state: str  # one of STATES
    control: Arm
    canary: Arm
    difference: float  # canary mean - control mean
    interval: tuple[float, float]  # the confidence sequence for the difference, clipped to [-1, 1]
    statistic: float  # the log evidence of the side the difference leans to
    threshold: float  # log(2/alpha): the statistic's boundary
    why: str  # one sentence a person reads

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "control": self.control.to_json(),
            "canary": self.canary.to_json(),
            "difference": round(self.difference, 4),
            "interval": [round(self.interval[0], 4), round(self.interval[1], 4)],
            "statistic": round(self.statistic, 4),
            "threshold": round(self.threshold, 4),
            "why": self.why,
        }


def _shrunk(squares: float, n: int) -> float:
    return (squares + _PSEUDO_SESSIONS * _MOST_VARIANCE) / (n - 1 + _PSEUDO_SESSIONS)


def _difference_variance(control: Arm, canary: Arm) -> float:
    """``s²``, the variance of the difference in means (module docstring, "The variances")."""
    n = control.n + canary.n
    between = control.n * canary.n / n * (canary.mean - control.mean) ** 2
    pooled = _shrunk(control.squares + canary.squares + between, n)
    of_control, of_canary = _shrunk(control.squares, control.n), _shrunk(canary.squares, canary.n)
    if canary.n <= control.n:
        of_canary = max(of_canary, pooled)
    else:
        of_control = max(of_control, pooled)
    return of_control / control.n + of_canary / canary.n


def decide(control: Sequence[float], canary: Sequence[float], design: Design) -> Decision:
    """The test on each arm's session scores (finite numbers in [0, 1]), in O(n)."""
    return decide_arms(Arm.of(control, name="control"), Arm.of(canary, name="canary"), design)


def decide_arms(control: Arm, canary: Arm, design: Design) -> Decision:
    """:func:`decide` on arms already summarised, in O(1): for a running tally."""
    threshold = design.threshold
    if control.n == 0 or canary.n == 0:
        difference, interval, statistic = 0.0, (-1.0, 1.0), 0.0
    else:
        t = design.effect
        difference = canary.mean - control.mean
        s2 = _difference_variance(control, canary)
        statistic = (t * abs(difference) - t * t / 2) / s2
        half = t / 2 + s2 * threshold / t
        interval = (max(-1.0, difference - half), min(1.0, difference + half))
    ready = control.n >= design.min_sessions and canary.n >= design.min_sessions
    if ready and statistic >= threshold:
        state = "promote" if difference > 0 else "retire"
    elif canary.n >= design.max_sessions:
        state = "expired"
    else:
        state = "running"
    why = _why(state, control, canary, difference, interval, design, ready)
    return Decision(state, control, canary, difference, interval, statistic, threshold, why)


def _why(
    state: str,
    control: Arm,
    canary: Arm,
    difference: float,
    interval: tuple[float, float],
    design: Design,
    ready: bool,
) -> str:
    if not ready and state == "running":
        return (
            f"waiting for {design.min_sessions} scored sessions on each arm: control has {control.n}, "
            f"the canary {canary.n}"
        )
    if round(abs(difference), 2) == 0:
        scores = "the same as control"
    else:
        scores = f"{abs(difference):.2f} {'higher' if difference > 0 else 'lower'}"
    ending = {
        "promote": "promoted",
        "retire": "retired",
        "expired": f"no clear difference by the limit of {design.max_sessions}; expired, not promoted",
        "running": f"not decided yet (it expires at {design.max_sessions} canary sessions)",
    }[state]
    return (
        f"the canary scores {scores} ({interval[0]:.2f} to {interval[1]:.2f}) after {control.n} control "
        f"and {canary.n} canary sessions: {ending}"
    )


def _normal_quantile(p: float) -> float:
    lo, hi = -40.0, 40.0
    for _ in range(200):  # bisection on erf: exact to the last bit, and only ``math``
        mid = (lo + hi) / 2
        if 0.5 * math.erfc(-mid / math.sqrt(2)) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def fixed_sample_size(design: Design, power: float = 0.8, sigma: float = 0.5) -> int:
    """Sessions per arm the two-sided fixed-size z-test at ``design.alpha`` needs for ``power``
    at a difference of ``design.effect``, when scores have standard deviation ``sigma`` (0.5, the
    default, is the most a score in [0, 1] can have): the baseline the sequential test is
    measured against."""
    power = _real(power, "power", "power")
    _require(0 < power < 1, "power", "above 0 and below 1", power)
    sigma = _real(sigma, "sigma", "sigma")
    _require(sigma > 0, "sigma", "above 0", sigma)
    z = _normal_quantile(1 - design.alpha / 2) + _normal_quantile(power)
    return math.ceil(2 * sigma**2 * z**2 / design.effect**2)
