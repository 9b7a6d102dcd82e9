"""95% intervals for live evidence: a mean, a proportion, and the differences of two of each.

Pure arithmetic on counts and moments (no samples, no scipy), so an interval can be computed
again from the JSON a daemon answered (``reef compare`` against a daemon does that):

* a mean: Student's t, ``mean ± t(0.975, n−1) · sd/√n`` (``sd`` with n − 1);
* a proportion: Wilson's score interval;
* a difference of means: Welch's t, with Welch–Satterthwaite degrees of freedom (the two sides
  need not have the same variance or size);
* a difference of proportions: Newcombe's hybrid score interval (his method 10), built from the
  two Wilson intervals; it stays inside [−1, 1] and behaves at 0 and 1, where the normal
  approximation does not.

The t quantile comes from the regularized incomplete beta function (Lentz's continued
fraction), good to about 1e-10, enough for an interval printed with three digits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "Interval",
    "mean_interval",
    "newcombe_difference",
    "t_quantile",
    "welch_difference",
    "wilson",
]

#: the two-sided 95% normal quantile
Z95 = 1.959963984540054


@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    def to_json(self) -> list[float]:
        return [round(self.low, 6), round(self.high, 6)]


def _betacf(a: float, b: float, x: float) -> float:
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` (> 0, not necessarily whole) degrees of
    freedom, for 0.5 ≤ p < 1."""
    if not 0.5 <= p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0.5 <= p < 1 and df > 0, not p={p}, df={df}")
    low, high = 0.0, 1.0
    while _t_cdf(high, df) < p:
        low, high = high, high * 2.0
    for _ in range(200):
        middle = (low + high) / 2.0
        if _t_cdf(middle, df) < p:
            low = middle
        else:
            high = middle
        if high - low < 1e-12 * max(1.0, high):
            break
    return (low + high) / 2.0


def mean_interval(mean: float, sd: float, n: int) -> Interval | None:
    """Student's t interval for a mean of ``n`` values with sample deviation ``sd``; None for
    fewer than two values (one value says nothing about its spread)."""
    if n < 2:
        return None
    half = t_quantile(0.975, n - 1) * sd / math.sqrt(n)
    return Interval(mean - half, mean + half)


def wilson(successes: int, n: int) -> Interval | None:
    """Wilson's score interval for ``successes`` out of ``n``; None when n is 0."""
    if n <= 0:
        return None
    p = successes / n
    z2 = Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return Interval(max(0.0, centre - half), min(1.0, centre + half))


def welch_difference(
    mean_a: float, sd_a: float, n_a: int, mean_b: float, sd_b: float, n_b: int
) -> tuple[Interval, float | None] | None:
    """The interval for mean_b − mean_a by Welch's t, and its degrees of freedom (None when
    both sides have no spread: the interval is the difference itself); None when either side
    has fewer than two values."""
    if n_a < 2 or n_b < 2:
        return None
    difference = mean_b - mean_a
    va, vb = sd_a * sd_a / n_a, sd_b * sd_b / n_b
    se = math.sqrt(va + vb)
    if se == 0:
        return Interval(difference, difference), None
    df = (va + vb) ** 2 / (va * va / (n_a - 1) + vb * vb / (n_b - 1))
    half = t_quantile(0.975, df) * se
    return Interval(difference - half, difference + half), df


def newcombe_difference(k_a: int, n_a: int, k_b: int, n_b: int) -> Interval | None:
    """Newcombe's hybrid score interval for k_b/n_b − k_a/n_a; None when either n is 0."""
    wa, wb = wilson(k_a, n_a), wilson(k_b, n_b)
    if wa is None or wb is None:
        return None
    pa, pb = k_a / n_a, k_b / n_b
    difference = pb - pa
    low = difference - math.sqrt((pb - wb.low) ** 2 + (wa.high - pa) ** 2)
    high = difference + math.sqrt((wb.high - pb) ** 2 + (pa - wa.low) ** 2)
    return Interval(max(-1.0, low), min(1.0, high))
