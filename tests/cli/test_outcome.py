"""``reef_core.client.Outcome``: the one reading of what became of a settled ask or learn step."""

from __future__ import annotations

import pytest

from reef_core.client import PROGRESS_STATES, Outcome, Progress

BASE = "http://127.0.0.1:8900"


def settled(result: dict | None) -> Progress:
    return Progress(id="ask_1", scenario="s", state="settled", result=result)


def test_a_release_is_released_with_its_step_page():
    outcome = Outcome.of(
        settled({"verdict": "selected", "release": "v1", "step": 1, "page_path": "/reef/p/1"}), BASE
    )
    assert outcome.released and not outcome.pending
    assert outcome.verdict == "selected" and outcome.release == "v1"
    assert outcome.candidate == "c1" and outcome.page_url == f"{BASE}/reef/p/1" and outcome.why == ""


def test_a_pending_candidate_waits_for_a_person():
    outcome = Outcome.of(settled({"verdict": "pending", "release": None, "step": 4}), BASE)
    assert outcome.pending and not outcome.released and outcome.candidate == "c4"


def test_nothing_published_says_the_first_failed_check_and_falls_back_on_the_asks_page():
    checks = [
        {"name": "well_formed", "passed": True, "detail": "ok"},
        {"name": "politeness", "passed": False, "detail": "rude"},
        {"name": "screens", "passed": False, "detail": "later"},
    ]
    outcome = Outcome.of(
        settled({"verdict": "rejected: politeness", "checks": checks}), BASE, {"page_path": "/a"}
    )
    assert not outcome.released and not outcome.pending
    assert outcome.verdict == "rejected: politeness" and outcome.why == ": politeness: rude"
    assert outcome.candidate == "the candidate" and outcome.page_url == f"{BASE}/a"


def test_no_result_is_an_unknown_verdict_without_a_page():
    outcome = Outcome.of(settled(None), BASE, {"ticket": "learn_1"})
    assert outcome.verdict == "unknown" and outcome.page_url is None and not outcome.released


def test_only_a_settled_ask_has_an_outcome():
    with pytest.raises(ValueError, match="only a settled ask"):
        Outcome.of(Progress(id="ask_1", scenario="s", state="checking"), BASE)


@pytest.mark.parametrize("state", PROGRESS_STATES)
def test_every_state_says_something(state: str):
    assert Progress(id="ask_1", scenario="s", state=state).says
