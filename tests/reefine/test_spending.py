"""The replay gate's error spending (``recipes/reefine/spending.py``): the levels, the sessions
they need, and exact computations that try to make a candidate no better pass more often than
``alpha`` allows over many gates."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import pytest

from recipes.reefine import replay
from recipes.reefine.spending import Spent, gamma, level, sessions_needed


def levels(outcomes: Iterable[bool], alpha: float) -> list[float]:
    """The level of each test when the tests pass (True) or fail (False) in this order."""
    history: list[Spent] = []
    for passed in outcomes:
        t, at = level(history, alpha)
        history.append(Spent(t, at, passed))
    return [spent.level for spent in history]


def test_gamma_is_one_over_t_times_t_plus_one() -> None:
    assert [gamma(t) for t in (1, 2, 3, 4)] == pytest.approx([1 / 2, 1 / 6, 1 / 12, 1 / 20])
    assert math.fsum(gamma(t) for t in range(1, 1001)) == pytest.approx(1 - 1 / 1001)


def test_levels_when_every_test_fails() -> None:
    assert levels([False] * 5, 0.1) == pytest.approx([0.1 / 2, 0.1 / 6, 0.1 / 12, 0.1 / 20, 0.1 / 30])
    t, _ = level([Spent(i, 0.1 * gamma(i), False) for i in (1, 2, 3)], 0.1)
    assert t == 4


def test_levels_when_every_test_passes_approach_alpha() -> None:
    found = levels([True] * 6, 0.1)
    assert found == pytest.approx([0.1 * t / (t + 1) for t in range(1, 7)])
    assert all(at < 0.1 for at in found)


def test_levels_of_a_mixed_history() -> None:
    # pass, fail, pass, pass, fail, then the next: a pass hands its level to the next test only
    found = levels([True, False, True, True, False, False], 0.1)
    first, second = 0.1 / 2, 0.1 / 6 + 0.1 / 2
    third = 0.1 / 12  # the second failed: nothing carried
    fourth = 0.1 / 20 + third
    fifth = 0.1 / 30 + fourth
    sixth = 0.1 / 42  # the fifth failed
    assert found == pytest.approx([first, second, third, fourth, fifth, sixth])


def test_a_carried_level_never_exceeds_alpha() -> None:
    # a pass at a looser alpha (confidence 0.5), then the confidence raised to 0.9
    t, at = level([Spent(1, 0.45, True)], 0.1)
    assert (t, at) == (2, 0.1)


def test_ten_thousand_failing_tests_spend_less_than_alpha() -> None:
    for alpha in (0.5, 0.2, 0.1, 0.01):
        found = levels([False] * 10_000, alpha)
        spent = math.fsum(found)
        assert spent < alpha
        assert spent == pytest.approx(alpha * (1 - 1 / 10_001))


def test_sessions_needed_at_the_first_levels() -> None:
    assert [sessions_needed(at) for at in levels([False] * 10, 1 - 0.9)] == [5, 6, 7, 8, 9, 9, 10, 10, 10, 11]
    assert [sessions_needed(at) for at in levels([False] * 10, 1 - 0.8)] == [4, 5, 6, 7, 8, 8, 9, 9, 9, 10]
    # after a pass at test 1 (0.05), test 2 tests at 0.0667: the 4 sessions of today's fixed level
    assert [sessions_needed(at) for at in levels([True, True, True], 0.1)] == [5, 4, 4]


def test_sessions_needed_is_the_all_wins_sign_test() -> None:
    for at in [*levels([False] * 60, 0.1), 0.5, 0.3, 0.25, 0.0625, 1e-9]:
        n = sessions_needed(at)
        assert replay.sign_test(n, 0) <= at
        assert n == 1 or replay.sign_test(n - 1, 0) > at
    for k in range(1, 40):  # exactly at, just above and just below a power of two
        assert sessions_needed(2.0**-k) == k
        assert sessions_needed(2.0**-k * (1 + 1e-12)) == k
        assert sessions_needed(2.0**-k * (1 - 1e-12)) == k + 1


@pytest.mark.parametrize("confidence", [0.5, 0.6, 0.75, 0.8, 0.875, 0.9, 0.95, 0.99])
def test_sessions_needed_at_a_fixed_level_is_what_the_gate_needed_before(confidence: float) -> None:
    before = max(1, math.ceil(math.log(1 - confidence) / math.log(0.5) - 1e-9))  # replay.min_sessions
    assert sessions_needed(1 - confidence) == before


@pytest.mark.parametrize("t", [0, -1, 1.5, True, "1"])
def test_gamma_refuses_an_index_below_one(t: Any) -> None:
    with pytest.raises(ValueError, match="index t must be an integer of at least 1"):
        gamma(t)


@pytest.mark.parametrize("alpha", [0, 1, -0.1, 1.5, math.nan, math.inf])
def test_level_refuses_alpha_outside_zero_to_one(alpha: float) -> None:
    with pytest.raises(ValueError, match=r"alpha \(1 - replay-confidence\) must be a number between 0 and 1"):
        level([], alpha)


def test_level_refuses_a_history_out_of_order() -> None:
    with pytest.raises(
        ValueError, match=re.escape("numbered 1, 2, 3, ... in order; the last of 2 is test 3")
    ):
        level([Spent(1, 0.05, False), Spent(3, 0.01, False)], 0.1)
    with pytest.raises(ValueError, match="test 1's level must be a number between 0 and 1"):
        level([Spent(1, 0.0, True)], 0.1)


@pytest.mark.parametrize("at", [0, 1, -0.5, 2, math.nan])
def test_sessions_needed_refuses_a_level_outside_zero_to_one(at: float) -> None:
    with pytest.raises(ValueError, match="level must be a number between 0 and 1"):
        sessions_needed(at)


# -- trying to break the guarantee: exact probabilities of a false pass -------------------------


def outcomes(sessions: int, tie: Fraction) -> list[tuple[int, int, Fraction]]:
    """(wins, losses, probability) of one gate over ``sessions`` when the candidate is no better:
    a session is a tie with probability ``tie``, else a win or a loss with equal chance.  A judge
    flipping a fair coin per order has ``tie = 1/2``; one that is never position-inconsistent, 0."""
    decisive = (1 - tie) / 2
    found = []
    for wins in range(sessions + 1):
        for losses in range(sessions + 1 - wins):
            ties = sessions - wins - losses
            ways = math.comb(sessions, wins) * math.comb(sessions - wins, losses)
            found.append((wins, losses, ways * decisive ** (wins + losses) * tie**ties))
    return found


def passes(wins: int, losses: int, at: float) -> bool:
    """The gate's rule (``replay.gate``) at level ``at``."""
    return wins > losses and wins + losses >= sessions_needed(at) and replay.sign_test(wins, losses) <= at


def pass_chance(table: Sequence[tuple[int, int, Fraction]], at: float) -> Fraction:
    return sum((p for wins, losses, p in table if passes(wins, losses, at)), Fraction(0))


def any_false_pass(sessions: int, tie: Fraction, alpha: float, steps: int, *, spend: bool) -> Fraction:
    """P(some gate of ``steps`` passes) when no candidate is better and each gate's verdicts are
    fresh.  With ``spend`` the levels come from ``level``: until the first pass every test
    failed, so the levels along that path are the only ones that matter.  Without, every gate
    tests at ``alpha`` (the gate before error spending)."""
    table = outcomes(sessions, tie)
    none = Fraction(1)
    history: list[Spent] = []
    for _ in range(steps):
        t, at = level(history, alpha) if spend else (0, alpha)
        if sessions_needed(at) > sessions:
            continue  # the gate cannot run a test: nothing spent, t stays
        none *= 1 - pass_chance(table, at)
        if spend:
            history.append(Spent(t, at, False))
    return 1 - none


@pytest.mark.parametrize("alpha", [0.5, 0.2, 0.1, 0.05])
@pytest.mark.parametrize("tie", [Fraction(0), Fraction(1, 2)])
@pytest.mark.parametrize("sessions", [1, 4, 5, 10, 20, 40])
def test_fifty_null_gates_pass_falsely_at_most_alpha(alpha: float, tie: Fraction, sessions: int) -> None:
    assert any_false_pass(sessions, tie, alpha, 50, spend=True) <= alpha


def test_the_fixed_level_breaks_the_same_check() -> None:
    # the same computation without spending: 10 sessions at confidence 0.9, a coin-flipping judge
    before = any_false_pass(10, Fraction(1, 2), 1 - 0.9, 50, spend=False)
    after = any_false_pass(10, Fraction(1, 2), 1 - 0.9, 50, spend=True)
    assert float(before) == pytest.approx(0.818, abs=0.001)
    assert float(after) == pytest.approx(0.0191, abs=0.0001)


def test_the_same_verdicts_every_gate_pass_falsely_at_most_alpha() -> None:
    # total dependence: every gate replays the same sessions and the judge repeats its verdicts,
    # so a gate passes iff the one outcome passes at its level; the largest level is the first
    for sessions in (5, 10, 20):
        for alpha in (0.2, 0.1):
            table = outcomes(sessions, Fraction(1, 2))
            first = level([], alpha)[1]
            chance = pass_chance(table, first)
            assert chance <= alpha / 2


@pytest.mark.parametrize("better_passes", [Fraction(0), Fraction(1, 2), Fraction(1)])
@pytest.mark.parametrize(
    "pattern",
    ["BN" * 25, "B" * 10 + "N" * 40, "NB" * 25, "BBN" * 16 + "BB", "BNNNBBBN" * 6 + "NB"],
)
def test_better_candidates_passing_do_not_raise_the_error_on_the_others(
    pattern: str, better_passes: Fraction
) -> None:
    """Strong control: candidates that really are better (B) pass with ``better_passes``, each
    pass handing its level on; the chance that some no-better candidate (N) passes stays <= alpha.
    Exact, over every path (the state is the next test's index and the level carried to it)."""
    alpha, sessions = 0.1, 10
    table = outcomes(sessions, Fraction(1, 2))
    paths: dict[tuple[int, float], Fraction] = {(0, 0.0): Fraction(1)}  # (tests so far, carried)
    false_pass = Fraction(0)
    for kind in pattern:
        moved: dict[tuple[int, float], Fraction] = {}
        for (done, carried), chance in paths.items():
            t = done + 1
            at = min(gamma(t) * alpha + carried, alpha)
            if sessions_needed(at) > sessions:
                moved[(done, carried)] = moved.get((done, carried), Fraction(0)) + chance
                continue
            win = better_passes if kind == "B" else pass_chance(table, at)
            if kind == "N":
                false_pass += chance * win
            else:
                moved[(t, at)] = moved.get((t, at), Fraction(0)) + chance * win
            moved[(t, 0.0)] = moved.get((t, 0.0), Fraction(0)) + chance * (1 - win)
        paths = moved
    assert false_pass <= alpha


def test_the_exact_pass_rule_is_the_gates() -> None:
    """``passes`` above is what ``replay.gate`` decides: every outcome of 10 sessions, at the
    first spending levels, through the real gate with scripted verdicts."""
    cases = [replay.ReplayCase(f"s{i}", "", [{"role": "user", "content": "do it"}], "x") for i in range(10)]
    for at in levels([False] * 9, 0.1) + levels([True] * 3, 0.1):
        for wins, losses, _ in outcomes(10, Fraction(1, 2)):
            ties = 10 - wins - losses
            model = ScriptedJudge(["win"] * wins + ["loss"] * losses + ["tie"] * ties)
            passed, _, summary = replay.gate(
                model, cases, render=lambda _case, side: side, confidence=0.9, level=at, max_calls=40
            )
            assert (summary["wins"], summary["losses"]) == (wins, losses)
            assert passed == passes(wins, losses, at), (wins, losses, at)


class ScriptedJudge:
    """A ``ModelCaller``: fixed answers per side, pairwise verdicts that make each session the
    next of ``results`` ("win", "loss", "tie")."""

    def __init__(self, results: list[str]) -> None:
        order = {"win": ("2", "1"), "loss": ("1", "2"), "tie": ("1", "1")}  # current first, candidate first
        self.verdicts = [v for result in results for v in order[result]]

    def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        system: str | None = None,
        max_tokens: int = 4096,
        timeout: float = 300.0,
        schema: dict[str, Any] | None = None,
    ) -> str:
        if system == replay.PAIRWISE_SYSTEM:
            return f'{{"better": "{self.verdicts.pop(0)}", "reason": "scripted"}}'
        return f"the {system} answer"
