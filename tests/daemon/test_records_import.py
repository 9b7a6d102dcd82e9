"""``POST /reef/records`` and ``/reef/records/batch``: datasets in the original Reef's shape."""

from __future__ import annotations

import httpx

from reef_core.store import DATA_REF
from tests.conftest import git

S = "s"
H = {"x-reef-scenario": S}


def _inference(key: str, text: str = "hi", **extra) -> dict:
    payload = {
        "model": "m",
        "messages": [{"role": "user", "content": text}],
        "metadata": {"tags": {"session": "s1"}},
        "response": {
            "choices": [{"index": 0, "message": {"role": "assistant", "content": f"re: {text[:20]}"}}]
        },
        **extra,
    }
    return {"agent_record_id": key, "request_type": "inference", "payload": payload}


def _report(key: str, *refs: str, score: float = 1.0) -> dict:
    return {
        "agent_record_id": key,
        "request_type": "report",
        "payload": {"references": list(refs), "score": score},
    }


def _batch(reef, *records: dict) -> httpx.Response:
    return httpx.post(
        f"{reef.url}/reef/records/batch", json={"records": list(records)}, headers=H, timeout=30
    )


def _log(reef) -> list[str]:
    found = git("--git-dir", reef.repo(S), "log", "--format=%s%n%b%x00", DATA_REF, check=False)
    return [entry.strip() for entry in found.stdout.split("\0") if entry.strip()]


def _moves(reef) -> int:
    return int(git("--git-dir", reef.repo(S), "rev-list", "--count", DATA_REF).stdout)


def test_a_batch_is_echoed_exactly_and_stored_one_commit_per_record(make_reef):
    reef = make_reef()
    answer = _batch(
        reef, _inference("sample-1"), _inference("sample-2", "yo"), _report("score-1", "sample-1")
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["records"] == [
        {"agent_record_id": "sample-1", "request_type": "inference", "scenario": S},
        {"agent_record_id": "sample-2", "request_type": "inference", "scenario": S},
        {"agent_record_id": "score-1", "request_type": "report", "scenario": S},
    ]
    rec1, _, rep = body["receipts"]
    data = reef.reader(S).data
    record = data.get(rec1).data
    assert record["idempotency_key"] == "sample-1" and record["tags"] == {"session": "s1"}
    assert record["request"] == {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert record["response"]["choices"][0]["message"]["content"] == "re: hi"
    assert record["route"] == "chat.completions" and record["client_format"] == "openai"
    assert data.get(rep).data["references"] == [rec1]  # the original id, translated
    log = _log(reef)
    assert len(log) == 3
    assert "Reef-Source-Id: sample-1" in log[2] and "Reef-Source-Id: score-1" in log[0]
    # the scenario's sessions read imported records like live ones
    sessions = httpx.get(f"{reef.url}/reef/scenarios/{S}/sessions", timeout=10).json()["sessions"]
    assert [s["session"] for s in sessions] == ["s1"]


def test_a_resent_batch_gets_the_same_answer_and_writes_nothing(make_reef):
    reef = make_reef()
    records = [_inference("a"), _report("r", "a")]
    first = _batch(reef, *records).json()
    count = _moves(reef)
    again = _batch(reef, *records)
    assert again.status_code == 200 and again.json() == first
    assert _moves(reef) == count
    # a live report on an imported record, by its receipt
    report = httpx.post(
        f"{reef.url}/reef/report",
        json={"score": 0, "references": [first["receipts"][0]]},
        headers=H,
        timeout=10,
    )
    assert report.status_code == 200


def test_changed_content_under_a_used_id_is_a_conflict_and_writes_nothing(make_reef):
    reef = make_reef()
    _batch(reef, _inference("a"))
    count = _moves(reef)
    changed = _batch(reef, _inference("b"), _inference("a", "something else"))
    assert changed.status_code == 409 and "'a'" in changed.json()["error"]["message"]
    twice = _batch(reef, _inference("c"), _inference("c", "other"))
    assert twice.status_code == 409 and "records[1]" in twice.text
    assert _moves(reef) == count


def test_a_bad_record_anywhere_refuses_the_whole_batch(make_reef):
    reef = make_reef()
    _batch(reef, _inference("seed"))
    count = _moves(reef)
    cases = [
        ([_inference("x"), _report("r", "nobody")], "records[1].payload.references[0]"),
        ([_inference("x"), _report("r", "x", "later")], "'later'"),
        ([_report("r", "later"), _inference("later")], "must follow the records it references"),
        (
            [_inference("x"), {"agent_record_id": "t", "request_type": "train", "payload": {}}],
            "POST /reef/train",
        ),
        ([_inference("x"), {**_inference("y"), "payload": {"messages": []}}], "records[1].payload.messages"),
        ([{**_inference("x"), "extra": 1}], "unknown record field 'extra'"),
        ([{"request_type": "inference", "payload": {}}], "records[0].agent_record_id"),
        (
            [{"agent_record_id": "q", "request_type": "report", "payload": {"references": []}}],
            "score or feedback",
        ),
        (
            [
                {
                    "agent_record_id": "q",
                    "request_type": "report",
                    "payload": {"feedback": "AKIAIOSFODNN7EXAMPLE"},
                }
            ],
            "refused by the screen",
        ),
    ]
    for records, words in cases:
        answer = _batch(reef, *records)
        assert answer.status_code == 400, (records, answer.text)
        assert words in answer.json()["error"]["message"], answer.text
    for body in ({"records": []}, {"records": [_inference(f"n{i}") for i in range(1001)]}, {"rows": []}):
        answer = httpx.post(f"{reef.url}/reef/records/batch", json=body, headers=H, timeout=30)
        assert answer.status_code == 400, answer.text
    assert _moves(reef) == count


def test_a_batch_over_ten_mebibytes_is_refused_whole_with_413(make_reef):
    reef = make_reef()
    _batch(reef, _inference("seed"))
    count = _moves(reef)
    big = [_inference(f"big-{i}", "x" * (1024 * 1024)) for i in range(10)]
    answer = _batch(reef, *big)
    assert answer.status_code == 413
    assert "10485760" in answer.json()["error"]["message"]
    assert _moves(reef) == count
    assert _batch(reef, *big[:9]).status_code == 200  # just under the limit


def test_one_record_and_a_report_through_the_live_route_by_original_id(make_reef):
    reef = make_reef()
    one = httpx.post(f"{reef.url}/reef/records", json=_inference("solo"), headers=H, timeout=10)
    assert one.status_code == 200, one.text
    body = one.json()
    assert {k: body[k] for k in ("agent_record_id", "request_type", "scenario")} == {
        "agent_record_id": "solo",
        "request_type": "inference",
        "scenario": S,
    }
    assert reef.reader(S).data.get(body["receipt"]).data["idempotency_key"] == "solo"
    report = httpx.post(
        f"{reef.url}/reef/records", json=_report("rate", "solo", score=0.5), headers=H, timeout=10
    )
    assert reef.reader(S).data.get(report.json()["receipt"]).data["references"] == [body["receipt"]]


def test_a_live_report_may_quote_an_imported_records_original_id(make_reef):
    reef = make_reef()
    receipt = _batch(reef, _inference("0f3a9c5e")).json()["receipts"][0]
    url = f"{reef.url}/reef/report"
    live = httpx.post(url, json={"score": 1, "references": ["0f3a9c5e"]}, headers=H, timeout=10)
    assert live.status_code == 200, live.text
    assert reef.reader(S).data.get(live.json()["agent_record_id"]).data["references"] == [receipt]
    unknown = httpx.post(url, json={"score": 1, "references": ["nobody"]}, headers=H, timeout=10)
    assert unknown.status_code == 400 and "'nobody' is neither a receipt" in unknown.text
