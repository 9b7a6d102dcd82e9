"""``reef compare SCENARIO vA vB`` on traffic through a real daemon (tests/release/traffic.py):
its ``--json`` and its table against a hand computation from the records, from the daemon and
from the repository alone; bad names."""

from __future__ import annotations

import json
import math

import pytest

from reef_core.release.intervals import t_quantile
from tests.cli.support import reef
from tests.release.traffic import SCENARIO, Served, assert_close, by_hand, served, wilson

__all__ = ["served"]


def _welch(a: dict, b: dict) -> dict:
    """b − a of two scores (``by_hand`` shapes), with Welch's interval worked out here."""
    difference = b["mean"] - a["mean"]
    va, vb = a["sd"] ** 2 / a["count"], b["sd"] ** 2 / b["count"]
    df = (va + vb) ** 2 / (va**2 / (a["count"] - 1) + vb**2 / (b["count"] - 1))
    half = t_quantile(0.975, df) * math.sqrt(va + vb)  # the quantile alone: checked in test_intervals
    return {
        "a": a["mean"],
        "b": b["mean"],
        "difference": difference,
        "interval": [difference - half, difference + half],
        "df": df,
    }


def _newcombe(a: dict, b: dict) -> dict:
    ka, na, kb, nb = a["errors"]["count"], a["requests"], b["errors"]["count"], b["requests"]
    (la, ua), (lb, ub) = wilson(ka, na), wilson(kb, nb)
    pa, pb = ka / na, kb / nb
    low = pb - pa - math.sqrt((pb - lb) ** 2 + (ua - pa) ** 2)
    high = pb - pa + math.sqrt((ub - pb) ** 2 + (pa - la) ** 2)
    return {"a": pa, "b": pb, "difference": pb - pa, "interval": [low, high], "method": "newcombe"}


@pytest.fixture(scope="module")
def hand(served: Served) -> dict:
    return by_hand(served.records, served.reports)


def test_compare_json_is_the_hand_computation(served: Served, hand: dict):
    result = reef("compare", SCENARIO, "v1", "v2", "--url", served.daemon.url, "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    v1, v2 = hand["v1"], hand["v2"]
    assert_close(shown["a"], v1, "a")
    assert_close(shown["b"], v2, "b")
    difference = shown["difference"]
    assert (difference["a"], difference["b"]) == ("v1", "v2")
    assert_close(difference["person_score"], {**_welch(v1["person"], v2["person"]), "method": "welch"})
    assert_close(difference["judge_score"], {**_welch(v1["judge"], v2["judge"]), "method": "welch"})
    p50 = v2["latency_ms"]["p50"] - v1["latency_ms"]["p50"]
    assert_close(difference["p50_ms"], {"difference": p50, "interval": None})
    assert_close(difference["error_rate"], _newcombe(v1, v2))
    # the repository alone answers the same
    from_repo = reef("compare", SCENARIO, "v1", "v2", "--state-dir", str(served.daemon.state_dir), "--json")
    assert from_repo.exit_code == 0, from_repo.output
    assert json.loads(from_repo.stdout) == shown


def test_compare_a_canary_without_the_spread_of_one_session(served: Served, hand: dict):
    shown = json.loads(reef("compare", SCENARIO, "v2", "c7", "--url", served.daemon.url, "--json").stdout)
    assert_close(shown["b"], hand["c7"], "c7")
    judge = shown["difference"]["judge_score"]  # c7's judge scored one session: no interval
    assert judge["interval"] is None
    assert judge["difference"] == pytest.approx(hand["c7"]["judge"]["mean"] - hand["v2"]["judge"]["mean"])


def test_compare_table_shows_both_sides_and_the_difference(served: Served, hand: dict):
    result = reef("compare", SCENARIO, "v1", "v2", "--url", served.daemon.url, env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"{SCENARIO}: v2 against v1"
    v1, v2 = hand["v1"], hand["v2"]

    def row(label: str) -> list[str]:
        line = next(line for line in lines if line.startswith(label))
        return line[len(label) :].split()

    assert row("sessions") == [
        str(v1["sessions"]),
        str(v2["sessions"]),
        f"{v2['sessions'] - v1['sessions']:+d}",
    ]
    person = _welch(v1["person"], v2["person"])
    low, high = person["interval"]
    assert row("person's score") == [
        f"{v1['person']['mean']:.2f}",
        f"({v1['person']['count']})",
        f"{v2['person']['mean']:.2f}",
        f"({v2['person']['count']})",
        f"{person['difference']:+.2f}",
        f"[{low:+.2f},",
        f"{high:+.2f}]",
        "Welch",
    ]
    errors = _newcombe(v1, v2)
    k1, k2 = v1["errors"]["count"], v2["errors"]["count"]
    assert row("error rate") == [
        f"{100 * errors['a']:.1f}%",
        f"({k1}/{v1['requests']})",
        f"{100 * errors['b']:.1f}%",
        f"({k2}/{v2['requests']})",
        f"{100 * errors['difference']:+.1f}",
        "pts",
        f"[{100 * errors['interval'][0]:+.1f},",
        f"{100 * errors['interval'][1]:+.1f}]",
        "Newcombe",
    ]
    assert row("tokens in/out") == [
        f"{v1['tokens']['in']}/{v1['tokens']['out']}",
        f"{v2['tokens']['in']}/{v2['tokens']['out']}",
    ]
    assert all(len(line) <= 100 for line in lines)


@pytest.mark.parametrize(
    ("a", "b", "code", "says"),
    [
        ("v1", "v99", 1, "s has no release v99 (its releases: v1, v2)"),
        ("banana", "v2", 2, "'banana' is neither a release (such as v2) nor a candidate (such as c7)"),
        ("v2", "V2", 2, "v2 is set against itself: name two different releases"),
        ("c3", "v1", 1, "s has no candidate c3"),
    ],
)
def test_bad_names_are_named(served: Served, a: str, b: str, code: int, says: str):
    result = reef("compare", SCENARIO, a, b, "--url", served.daemon.url)
    assert result.exit_code == code
    assert says in result.stderr
    assert result.stdout == ""
