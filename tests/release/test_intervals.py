"""The 95% intervals of live evidence against printed tables and published worked examples."""

from __future__ import annotations

import math

import pytest

from reef_core.release.intervals import (
    mean_interval,
    newcombe_difference,
    t_quantile,
    welch_difference,
    wilson,
)

# Student's t, 0.975 quantile (any printed table)
TABLE = {1: 12.7062, 2: 4.3027, 3: 3.1824, 5: 2.5706, 10: 2.2281, 30: 2.0423, 120: 1.9799}


@pytest.mark.parametrize(("df", "expected"), sorted(TABLE.items()))
def test_t_quantile_matches_the_table(df: int, expected: float):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=5e-5)


def _t_cdf_by_simpson(t: float, df: float, steps: int = 20_000) -> float:
    """∫ from 0 to t of Student's density, plus one half: an independent check."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def density(x: float) -> float:
        return c * (1 + x * x / df) ** (-(df + 1) / 2)

    h = t / steps
    total = density(0) + density(t) + sum((4 if i % 2 else 2) * density(i * h) for i in range(1, steps))
    return 0.5 + total * h / 3


@pytest.mark.parametrize("df", [1.7, 4.5, 9.25, 57.3])
def test_t_quantile_for_welchs_fractional_degrees_of_freedom(df: float):
    assert _t_cdf_by_simpson(t_quantile(0.975, df), df) == pytest.approx(0.975, abs=1e-6)


def test_a_mean_needs_two_values():
    assert mean_interval(0.5, 0.0, 1) is None
    interval = mean_interval(2.0, 1.0, 4)
    assert interval is not None
    assert (interval.low, interval.high) == pytest.approx((2.0 - 3.1824 / 2, 2.0 + 3.1824 / 2), abs=1e-4)


def test_wilson_against_newcombes_table():
    # Newcombe (1998), "Two-sided confidence intervals for the single proportion", Table I
    assert _pair(wilson(81, 263)) == pytest.approx((0.2553, 0.3662), abs=1e-4)
    assert _pair(wilson(15, 148)) == pytest.approx((0.0624, 0.1605), abs=1e-4)
    assert _pair(wilson(0, 20)) == pytest.approx((0.0, 0.1611), abs=1e-4)
    assert wilson(0, 0) is None


def test_newcombe_against_his_worked_examples():
    # Newcombe (1998), "Interval estimation for the difference between independent proportions",
    # method 10; the difference here is the second minus the first
    assert _pair(newcombe_difference(48, 80, 56, 70)) == pytest.approx((0.0524, 0.3339), abs=1e-4)
    assert _pair(newcombe_difference(0, 29, 5, 56)) == pytest.approx((-0.0381, 0.1926), abs=1e-4)
    assert _pair(newcombe_difference(0, 20, 0, 10)) == pytest.approx((-0.1611, 0.2775), abs=1e-4)
    assert newcombe_difference(1, 2, 0, 0) is None


def test_welch_by_its_formula():
    found = welch_difference(1.0, 0.5, 5, 2.0, 1.5, 8)
    assert found is not None
    interval, df = found
    va, vb = 0.25 / 5, 2.25 / 8
    assert df == pytest.approx((va + vb) ** 2 / (va**2 / 4 + vb**2 / 7))
    half = t_quantile(0.975, df) * math.sqrt(va + vb)
    assert _pair(interval) == pytest.approx((1.0 - half, 1.0 + half))
    assert welch_difference(1.0, 0.0, 1, 2.0, 0.0, 3) is None  # one value has no spread to use
    same = welch_difference(1.0, 0.0, 2, 1.0, 0.0, 2)
    assert same is not None and _pair(same[0]) == (0.0, 0.0) and same[1] is None


def _pair(interval) -> tuple[float, float]:
    assert interval is not None
    return interval.low, interval.high
