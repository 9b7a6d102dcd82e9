"""Live evidence: traffic through a real daemon (tests/release/traffic.py), the numbers the
releases route answers against a hand computation from the records read back, the cache, the
step page; and the attribution and the unit of a score on items made by hand."""

from __future__ import annotations

import httpx
import pytest

from reef_core.release.evidence import (
    Evidence,
    EvidenceIndex,
    release_evidence,
    scenario_evidence,
    served_release,
)
from reef_core.store import Item, Store, StoreOptions
from tests.conftest import git
from tests.release.traffic import SCENARIO, Served, assert_close, by_hand, served

__all__ = ["served"]


def _items(s: Served) -> list[Item]:
    merged = sorted(s.records + s.reports, key=lambda data: data["id"][4:])
    return [Item(data["id"], data["kind"], data) for data in merged]


def test_the_route_answers_what_the_records_say(served: Served):
    listing = httpx.get(f"{served.daemon.url}/reef/scenarios/{SCENARIO}/releases", timeout=10).json()
    expected = by_hand(served.records, served.reports)
    assert sorted(listing["evidence"]) == sorted(expected) == ["c7", "v1", "v2"]
    assert list(listing["evidence"]) == ["v2", "v1", "c7"]  # the chain newest first, then the canary
    for name, hand in expected.items():
        assert_close(listing["evidence"][name], hand, name)
    rows = {row["release"]: row for row in listing["releases"]}
    assert rows["v2"]["evidence"] == listing["evidence"]["v2"]
    assert rows["v1"]["evidence"] == listing["evidence"]["v1"]
    assert rows["v2"]["current"] and rows["v2"]["operation"] == "evolve"  # the old fields are kept
    # and the pure function gives the same on the items read back through the API
    assert {k: v.to_json() for k, v in release_evidence(_items(served)).items()} == listing["evidence"]


def test_the_hand_computation_is_the_traffic_sent(served: Served):
    """What the traffic module scripted, counted once more by eye: sessions, scores, tokens, errors."""
    hand = by_hand(served.records, served.reports)
    v1, v2, c7 = hand["v1"], hand["v2"], hand["c7"]
    # v1: a, b, the untagged request (a session of its own) and e (a harness still on v1)
    assert (v1["sessions"], v1["requests"], v1["errors"]["count"]) == (4, 8, 1)
    # v2: c, d and g ("banana" is no release name: the daemon's tip served it)
    assert (v2["sessions"], v2["requests"], v2["errors"]["count"]) == (3, 6, 1)
    assert (c7["sessions"], c7["requests"], c7["errors"]["count"]) == (2, 4, 1)
    # one number per session: a (1 and 0) is 0.5, b 1, untagged 0, e 1
    assert (v1["person"]["count"], v1["person"]["mean"]) == (4, pytest.approx(0.625))
    assert (v1["judge"]["count"], v1["judge"]["mean"]) == (2, pytest.approx(0.3125))  # a 0.625, b 0
    # c (1 and 0.5) is 0.75; d 0, by its metadata.session alone; feedback without a score counts not
    assert (v2["person"]["count"], v2["person"]["mean"]) == (2, pytest.approx(0.375))
    assert v2["judge"] == {"count": 2, "mean": 1.0, "sd": 0.0, "interval": [1.0, 1.0]}
    assert (c7["person"]["count"], c7["person"]["mean"], c7["judge"]["count"]) == (2, 0.5, 1)
    assert c7["judge"]["interval"] is None  # one session says nothing of the spread
    # tokens: the Anthropic message and stream count as OpenAI's do; a stream without
    # include_usage reports none, nor does the cut one
    assert v1["tokens"] == {"in": 36 + 20 + 9 + 10 + 16, "out": 15 + 7 + 3 + 5 + 2, "requests": 7}
    assert v2["tokens"] == {"in": 61 + 14 + 21, "out": 21 + 8 + 6, "requests": 4}
    assert c7["tokens"] == {"in": 17 + 18 + 19, "out": 3 + 4 + 5, "requests": 3}
    assert v1["latency_ms"]["count"] == 7 and v2["latency_ms"]["count"] == 5
    assert [s for s in served.traffic.statuses if s >= 400] and served.traffic.statuses.count(200) >= 16


def test_the_step_page_shows_the_evidence(served: Served):
    page = httpx.get(
        f"{served.daemon.url}/reef/harness/releases/v2/page", params={"scenario": SCENARIO}, timeout=10
    ).text
    evidence = by_hand(served.records, served.reports)["v2"]
    assert "<h2>In use</h2>" in page
    row = page.split("<h2>In use</h2>", 1)[1].split("</table>", 1)[0]
    p50, p95 = evidence["latency_ms"]["p50"], evidence["latency_ms"]["p95"]
    assert "<td>v2</td><td>3</td><td>6</td>" in row
    assert (
        f"<td>0.38 [{evidence['person']['interval'][0]:.2f}, {evidence['person']['interval'][1]:.2f}]" in row
    )
    assert f"<td>{p50:.0f} / {p95:.0f}</td>" in row
    assert "<td>96 / 35</td>" in row and "1 of 6 (16.7%" in row


def test_the_cache_answers_an_unchanged_branch_and_reads_on_after_new_items(tmp_path):
    store = Store(tmp_path / "state", StoreOptions(pack_every=0))
    index = EvidenceIndex()
    with store.open("s", create=True) as writer:
        first = writer.append_sync("record", _record("v1", "a", 100.0))
        writer.append_sync("report", {"score": 1.0, "references": [first]})
        reader = store.reader("s")
        kept = index.evidence(reader)
        assert index.evidence(reader) is kept  # the tip did not move: nothing is read again
        assert kept["v1"].person.mean == 1.0
        for n in range(5):
            writer.append_sync("record", _record("v2", f"b{n}", 10.0 * n))
        renewed = index.evidence(reader)
    everything = release_evidence(reader.data.iter_items())
    assert renewed == everything and renewed["v2"].requests == 5 and renewed["v1"].requests == 1
    # a data ref moved back (rewritten by hand): it holds fewer items than were read, so all
    # is read again rather than kept
    git("--git-dir", str(reader.path), "update-ref", "refs/heads/data", "refs/heads/data~3")
    again = index.evidence(store.reader("s"))
    assert again["v2"].requests == 2 and again == release_evidence(store.reader("s").data.iter_items())
    assert scenario_evidence(store.reader("s")) == again  # the shared index, by repository path


def _record(release: str, session: str, total_ms: float, **more) -> dict:
    return {
        "release": release,
        "tags": {"session": session},
        "status": 200,
        "complete": True,
        "timings": {"total_ms": total_ms},
        **more,
    }


def _made(*bodies: tuple[str, dict]) -> list[Item]:
    return [
        Item(f"{'rec' if kind == 'record' else 'rep'}_{n:028x}", kind, body)
        for n, (kind, body) in enumerate(bodies)
    ]


def test_served_release_prefers_the_harness_tag():
    assert served_release({"release": "v3", "tags": {"release": "v2"}}) == "v2"
    assert served_release({"release": "v3", "tags": {"release": "c7"}}) == "c7"
    assert served_release({"release": "v3", "tags": {"release": "banana"}}) == "v3"
    assert served_release({"release": "c4", "tags": {}}) == "c4"  # weights: the canary's adapter
    assert served_release({"release": None, "tags": {"session": "x"}}) is None


def test_a_score_is_one_number_per_session():
    items = _made(
        ("record", _record("v1", "long", 1.0)),  # rec_0
        ("record", _record("v1", "short", 1.0)),  # rec_1
        ("report", {"score": 1.0, "references": ["rec_" + "0" * 28]}),
        ("report", {"score": 1.0, "references": ["rec_" + "0" * 28]}),
        ("report", {"score": 1.0, "references": ["rec_" + "0" * 28]}),
        ("report", {"score": 0.0, "references": ["rec_" + "0" * 27 + "1"]}),
        ("report", {"score": True, "references": ["rec_" + "0" * 27 + "1"]}),  # not a number
    )
    evidence = release_evidence(items)["v1"]
    assert (evidence.person.count, evidence.person.mean) == (2, 0.5)  # not 3/4: sessions weigh alike
    assert evidence.judge.count == 0 and evidence.score == (evidence.person, "person")


def test_a_session_served_by_two_releases_is_scored_apart():
    items = _made(
        ("record", _record("v1", "x", 5.0)),
        ("record", _record("v2", "x", 7.0)),
        ("report", {"score": 0.0, "references": ["rec_" + "0" * 28]}),
        ("report", {"score": 1.0, "references": ["rec_" + "0" * 27 + "1"], "metadata": {"source": "judge"}}),
    )
    found = release_evidence(items)
    assert found["v1"].sessions == found["v2"].sessions == 1
    assert (found["v1"].person.mean, found["v1"].judge.count) == (0.0, 0)
    assert (found["v2"].judge.mean, found["v2"].person.count) == (1.0, 0)
    assert found["v2"].score == (found["v2"].judge, "judge")


def test_evidence_survives_json():
    items = _made(
        ("record", _record("v1", "a", 3.0, response={"usage": {"prompt_tokens": 4, "completion_tokens": 2}})),
        ("record", _record("v1", "b", 9.0, status=502, error="upstream down", complete=False)),
        ("report", {"score": 0.5, "references": ["rec_" + "0" * 28]}),
    )
    evidence = release_evidence(items)["v1"]
    assert Evidence.from_json(evidence.to_json()) == evidence
    assert (evidence.p50_ms, evidence.p95_ms, evidence.errors, evidence.tokens_in) == (3.0, 3.0, 1, 4)
    assert Evidence.from_json(Evidence("c9").to_json()) == Evidence("c9")
