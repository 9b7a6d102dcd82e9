"""The canary's sequential test, as a person watching canaries would notice it: better ones are
promoted, worse ones retired, equal ones run to ``max_sessions`` and expire, and the stated
error rate holds over many seeded canaries."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable

import pytest

from reef_core.errors import InvalidInput
from reef_core.release.sequential import Arm, Decision, Design, decide, decide_arms, fixed_sample_size

DESIGN = Design()
Draw = Callable[[random.Random], float]


def good_bad(p: float) -> Draw:
    return lambda rng: 1.0 if rng.random() < p else 0.0


def judge(accept: float, reject: float) -> Draw:
    """A judge's verdicts: accept 1, correct 0.25, reject 0."""
    return lambda rng: (lambda u: 1.0 if u < accept else 0.0 if u < accept + reject else 0.25)(rng.random())


def canary(
    rng: random.Random, control: Draw, candidate: Draw, *, share: float = 0.5, true: float | None = None
) -> tuple[Decision, bool]:
    """One canary run as the daemon runs it: the test after every session until it ends.
    Returns the last decision and whether the interval held ``true`` at every look."""
    arms = {"control": Arm(), "canary": Arm()}
    covered = True
    while True:
        name = "canary" if rng.random() < share else "control"
        arms[name] = arms[name].add((candidate if name == "canary" else control)(rng))
        decision = decide_arms(arms["control"], arms["canary"], DESIGN)
        if true is not None and not decision.interval[0] <= true <= decision.interval[1]:
            covered = False
        if decision.state != "running":
            return decision, covered


def test_a_clearly_better_canary_is_promoted():
    rng = random.Random(11)
    decision, _ = canary(rng, good_bad(0.5), good_bad(0.9))
    assert decision.state == "promote"
    assert decision.canary.n < DESIGN.max_sessions
    assert decision.difference > 0 and decision.interval[0] > 0
    assert decision.why.startswith("the canary scores ") and decision.why.endswith(": promoted")
    assert f"after {decision.control.n} control and {decision.canary.n} canary sessions" in decision.why


def test_a_clearly_worse_canary_is_retired():
    rng = random.Random(12)
    control = [1.0 if rng.random() < 0.8 else 0.0 for _ in range(60)]
    worse = [1.0 if rng.random() < 0.3 else 0.0 for _ in range(60)]
    decision = decide(control, worse, DESIGN)
    assert decision.state == "retire"
    assert decision.difference < 0 and decision.interval[1] < 0
    assert " lower (" in decision.why and decision.why.endswith(": retired")


def test_an_equal_canary_runs_until_max_sessions_then_expires():
    control: list[float] = []
    candidate: list[float] = []
    for i in range(2 * DESIGN.max_sessions):
        (candidate if i % 2 else control).append(float(i // 2 % 2))  # 0, 0, 1, 1, 0, 0, ...
        decision = decide(control, candidate, DESIGN)
        if len(candidate) < DESIGN.max_sessions:
            assert decision.state == "running", (i, decision.why)
    assert len(candidate) == DESIGN.max_sessions
    assert decision.state == "expired"
    assert decision.why.endswith("sessions: no clear difference by the limit of 230; expired, not promoted")
    assert decision.interval[0] < 0 < decision.interval[1]


def test_a_seeded_equal_canary_is_not_promoted_and_expires():
    decision, _ = canary(random.Random(5), judge(0.4, 0.35), judge(0.4, 0.35))
    assert decision.state == "expired"
    assert decision.canary.n == DESIGN.max_sessions


def test_fewer_than_min_sessions_keeps_running_whatever_the_scores():
    nine_bad, nine_good = [0.0] * 9, [1.0] * 9
    decision = decide(nine_bad, nine_good, DESIGN)
    assert decision.state == "running"
    assert decision.why == "waiting for 10 scored sessions on each arm: control has 9, the canary 9"
    assert decide([0.0] * 50, nine_good, DESIGN).state == "running"
    assert decide(nine_bad, [1.0] * 50, DESIGN).state == "running"
    assert decide([0.0] * 30, [1.0] * 30, DESIGN).state == "promote"  # enough of both, and clear
    empty = decide([], [], DESIGN)
    assert (empty.state, empty.interval, empty.difference) == ("running", (-1.0, 1.0), 0.0)


def test_a_larger_improvement_is_promoted_sooner():
    def median_sessions(p: float) -> float:
        rng = random.Random(21)
        runs = [canary(rng, good_bad(0.5), good_bad(p))[0] for _ in range(25)]
        sessions = sorted(d.control.n + d.canary.n for d in runs)
        return sessions[len(sessions) // 2]

    assert median_sessions(0.9) < median_sessions(0.75) < 2 * DESIGN.max_sessions


def test_the_interval_holds_the_true_difference_at_every_look():
    """A confidence sequence at 1 - alpha: over 200 seeded canaries the interval may miss the
    true difference at some look in at most alpha of them; 200·0.05 = 10 misses plus three
    binomial standard deviations (3·sqrt(200·0.05·0.95) ≈ 9) allows 19."""
    rng = random.Random(31)
    cases = [(0.5, 0.5), (0.5, 0.6), (0.6, 0.45), (0.3, 0.6), (0.85, 0.7)]
    misses, runs = 0, 0
    for control_p, canary_p in cases:
        for _ in range(40):
            true = canary_p - control_p
            decision, covered = canary(rng, good_bad(control_p), good_bad(canary_p), true=true)
            misses += not covered
            runs += 1
            low, high = decision.interval  # it excludes 0 exactly when the test decides
            assert {"promote": low >= 0, "retire": high <= 0}.get(decision.state, low <= 0 <= high)
    assert runs == 200
    assert misses <= 19


def test_equal_canaries_are_promoted_at_most_alpha_of_the_time():
    """The test promotes a canary no better than control with probability at most alpha/2
    (and retires one no worse at most alpha/2).  Over 300 seeded equal canaries (/good at 50%
    on an even share, judge scores, /good at 85% on a 20% share) that is 7.5 expected; three
    binomial standard deviations (3·sqrt(300·0.025·0.975) ≈ 8.1) on top give 15, alpha·300."""
    rng = random.Random(41)
    kinds = [(good_bad(0.5), 0.5), (judge(0.4, 0.35), 0.5), (good_bad(0.85), 0.2)]
    states: dict[str, int] = {}
    for draw, share in kinds:
        for _ in range(100):
            decision, _ = canary(rng, draw, draw, share=share)
            states[decision.state] = states.get(decision.state, 0) + 1
    assert sum(states.values()) == 300
    assert states.get("promote", 0) <= DESIGN.alpha * 300
    assert states.get("retire", 0) <= DESIGN.alpha * 300
    assert states["expired"] >= 300 * (1 - DESIGN.alpha) - 8  # the rest ran to max_sessions


def test_worse_canaries_are_not_promoted():
    rng = random.Random(51)
    states = [canary(rng, good_bad(0.6), good_bad(0.45))[0].state for _ in range(100)]
    assert "promote" not in states
    assert states.count("retire") >= 60  # power about 0.8 at effect


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 1.5, -0.1, "0.5", None, True])
@pytest.mark.parametrize("arm", ["control", "canary"])
def test_a_score_that_is_not_a_number_in_0_1_is_named(bad, arm):
    scores = {"control": [0.5] * 12, "canary": [0.5] * 12}
    scores[arm][3] = bad
    with pytest.raises(InvalidInput) as raised:
        decide(scores["control"], scores["canary"], DESIGN)
    assert raised.value.field == arm
    assert f"{arm} score 3" in raised.value.message


def test_adding_a_bad_score_to_an_arm_is_refused():
    with pytest.raises(InvalidInput) as raised:
        Arm().add(math.nan, name="canary")
    assert raised.value.field == "canary"


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"alpha": 0}, "canary-alpha"),
        ({"alpha": 0.5}, "canary-alpha"),
        ({"alpha": -0.1}, "canary-alpha"),
        ({"alpha": math.nan}, "canary-alpha"),
        ({"alpha": "0.05"}, "canary-alpha"),
        ({"effect": 0}, "canary-effect"),
        ({"effect": 1.5}, "canary-effect"),
        ({"effect": math.inf}, "canary-effect"),
        ({"min_sessions": 0}, "canary-min-sessions"),
        ({"min_sessions": 2.5}, "canary-min-sessions"),
        ({"min_sessions": True}, "canary-min-sessions"),
        ({"max_sessions": 9}, "canary-max-sessions"),
        ({"min_sessions": 50, "max_sessions": 40}, "canary-max-sessions"),
        ({"max_sessions": "200"}, "canary-max-sessions"),
    ],
)
def test_a_bad_design_names_its_setting(settings, field):
    with pytest.raises(InvalidInput) as raised:
        Design(**settings)
    assert raised.value.field == field
    assert raised.value.message.startswith(field)


def test_the_edges_of_a_design_are_accepted():
    Design(alpha=0.49, effect=1, min_sessions=1, max_sessions=1)
    assert Design().threshold == pytest.approx(math.log(40))


def test_the_decision_as_json_rounds_its_numbers():
    rng = random.Random(61)
    decision = decide([rng.random() for _ in range(37)], [rng.random() for _ in range(41)], DESIGN)
    data = decision.to_json()
    assert list(data) == [
        "state",
        "control",
        "canary",
        "difference",
        "interval",
        "statistic",
        "threshold",
        "why",
    ]
    assert data["control"]["n"] == 37 and data["canary"]["n"] == 41
    numbers = [data["difference"], *data["interval"], data["statistic"], data["threshold"]]
    numbers += [data[arm][key] for arm in ("control", "canary") for key in ("mean", "variance")]
    assert all(round(x, 4) == x for x in numbers)
    assert json.loads(json.dumps(data)) == data


def test_decide_is_deterministic_and_agrees_with_a_running_tally():
    rng = random.Random(71)
    control = [rng.choice((0.0, 0.25, 1.0)) for _ in range(80)]
    candidate = [rng.choice((0.25, 1.0)) for _ in range(70)]
    assert decide(control, candidate, DESIGN) == decide(list(control), list(candidate), DESIGN)
    tally = {"control": Arm(), "canary": Arm()}
    for name, scores in (("control", control), ("canary", candidate)):
        for score in scores:
            tally[name] = tally[name].add(score)
    running = decide_arms(tally["control"], tally["canary"], DESIGN)
    whole = decide(control, candidate, DESIGN)
    assert running.state == whole.state
    assert running.statistic == pytest.approx(whole.statistic)
    assert running.interval == pytest.approx(whole.interval)


def test_an_arm_summarises_its_scores():
    assert Arm.of([]) == Arm(0, 0.0, 0.0)
    assert Arm.of([1.0]) == Arm(1, 1.0, 0.0)
    arm = Arm.of([0, 1, 1, 0.25])
    assert (arm.n, arm.mean) == (4, pytest.approx(0.5625))
    assert arm.variance == pytest.approx(sum((x - 0.5625) ** 2 for x in (0, 1, 1, 0.25)) / 3)


def test_fixed_sample_size_is_the_two_sided_z_test():
    assert fixed_sample_size(DESIGN) == 175  # 2·0.25·(1.96 + 0.84)²/0.15² = 174.4
    assert fixed_sample_size(DESIGN, power=0.9) > 175
    assert fixed_sample_size(DESIGN, sigma=0.4) < 175
    assert fixed_sample_size(Design(effect=0.3)) == 44
    with pytest.raises(InvalidInput) as raised:
        fixed_sample_size(DESIGN, power=1)
    assert raised.value.field == "power"
    with pytest.raises(InvalidInput) as raised:
        fixed_sample_size(DESIGN, sigma=0)
    assert raised.value.field == "sigma"
