"""reef's own routes, auth, and every kind of bad input: a clear 4xx, and nothing written."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from tests.conftest import git
from tests.fakes.upstream import Delay, Slow, Text

H = {"x-reef-scenario": "s"}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def post(reef, path, *, headers=None, **kwargs) -> httpx.Response:
    return httpx.post(f"{reef.url}{path}", headers={**H, **(headers or {})}, timeout=10, **kwargs)


def receipt_of(reef) -> str:
    response = post(reef, "/v1/chat/completions", json=CHAT)
    assert response.status_code == 200, response.text
    return response.headers["x-reef-agent-record-id"]


def data_tip(reef, scenario="s") -> str | None:
    path = reef.state_dir / "scenarios" / f"{scenario}.git"
    if not path.exists():
        return None
    return git("-C", str(path), "rev-parse", "--verify", "-q", "data", check=False).stdout.strip() or None


def test_health_needs_no_token_everything_else_does(make_reef):
    reef = make_reef(env={"REEF_TOKEN": "s3cret-token"})
    assert httpx.get(f"{reef.url}/healthz").json()["ok"] is True
    denied = post(reef, "/v1/chat/completions", json=CHAT)
    assert denied.status_code == 401 and denied.json()["error"]["type"] == "authentication_error"
    wrong = post(reef, "/v1/messages", headers={"x-api-key": "nope"}, json={**CHAT, "max_tokens": 5})
    assert wrong.status_code == 401 and wrong.json()["type"] == "error"
    assert (
        post(
            reef, "/v1/chat/completions", headers={"Authorization": "Bearer s3cret-token"}, json=CHAT
        ).status_code
        == 200
    )
    assert (
        post(
            reef, "/v1/messages", headers={"x-api-key": "s3cret-token"}, json={**CHAT, "max_tokens": 5}
        ).status_code
        == 200
    )
    assert httpx.get(f"{reef.url}/reef/status").status_code == 401
    assert (
        httpx.get(f"{reef.url}/reef/status", headers={"Authorization": "Bearer s3cret-token"}).status_code
        == 200
    )
    assert data_tip(reef) is not None  # only the two authorised requests were recorded
    assert len(list(reef.reader("s").data.iter_items())) == 2


def test_reef_token_is_not_sent_upstream_but_an_open_reef_passes_the_clients_key(make_reef, upstream):
    closed = make_reef(env={"REEF_TOKEN": "s3cret-token"})
    post(closed, "/v1/chat/completions", headers={"Authorization": "Bearer s3cret-token"}, json=CHAT)
    assert "authorization" not in upstream.requests[-1].headers
    opened = make_reef()
    post(opened, "/v1/chat/completions", headers={"Authorization": "Bearer sk-users-own"}, json=CHAT)
    assert upstream.requests[-1].headers["authorization"] == "Bearer sk-users-own"
    keyed = make_reef("--inference.upstream-api-key", "sk-reefs-key", env={"REEF_TOKEN": "s3cret-token"})
    post(keyed, "/v1/chat/completions", headers={"Authorization": "Bearer s3cret-token"}, json=CHAT)
    assert upstream.requests[-1].headers["authorization"] == "Bearer sk-reefs-key"
    for request in upstream.requests:
        assert not any(name.startswith("x-reef-") for name in request.headers)


BAD_INFERENCE = [  # (headers sent, body, field named in the error)
    ({}, CHAT, "x-reef-scenario"),
    ({"x-reef-scenario": "../etc"}, CHAT, "x-reef-scenario"),
    ({"x-reef-scenario": ""}, CHAT, "x-reef-scenario"),
    ({**H, "x-reef-capture": "maybe"}, CHAT, "x-reef-capture"),
    (H, {"model": "m"}, "messages"),
    (H, {"model": "m", "messages": []}, "messages"),
    (H, {"model": "m", "messages": ["hi"]}, "messages[0]"),
    (H, {"model": 5, "messages": [{"role": "user", "content": "x"}]}, "model"),
    (H, {**CHAT, "stream": "yes"}, "stream"),
    (H, [1, 2], "body"),
]


@pytest.mark.parametrize("headers, body, field", BAD_INFERENCE)
def test_bad_inference_requests_name_the_problem_and_write_nothing(make_reef, upstream, headers, body, field):
    reef = make_reef()
    receipt_of(reef)
    before, sent = data_tip(reef), len(upstream.requests)
    response = httpx.post(f"{reef.url}/v1/chat/completions", headers=headers, json=body, timeout=10)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == field
    assert data_tip(reef) == before and len(upstream.requests) == sent


def test_invalid_json_and_oversized_bodies(make_reef, upstream):
    reef = make_reef("--reef.max-body-bytes", "2000")
    receipt_of(reef)
    before = data_tip(reef)
    broken = post(
        reef,
        "/v1/messages",
        content=b'{"model": "m", "messages": [',
        headers={"content-type": "application/json"},
    )
    assert broken.status_code == 400 and "not valid JSON" in broken.json()["error"]["message"]
    assert broken.json()["type"] == "error"  # Anthropic route, Anthropic envelope
    huge = post(reef, "/v1/chat/completions", json={**CHAT, "pad": "x" * 5000})
    assert huge.status_code == 413
    assert data_tip(reef) == before


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_deep_json_is_a_400_naming_the_limit_on_every_route(make_reef, upstream):
    """5,000 nested arrays was a 500 (the parser's recursion); now every JSON body is read
    under one nesting limit, inference included, and the limit is said."""
    reef = make_reef()
    receipt = receipt_of(reef)
    before = data_tip(reef)
    hostile = b'{"score": 1, "references": [], "feedback": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    for path, headers in (
        ("/reef/report", {}),
        ("/reef/train", {}),
        ("/v1/chat/completions", {}),
        ("/v1/messages", {}),
    ):
        response = post(reef, path, content=hostile, headers={"content-type": "application/json", **headers})
        assert response.status_code == 400, (path, response.text)
        error = response.json()["error"]
        assert "deeper than 128 levels" in error["message"] and "reef.max-json-depth" in error["message"]
    # at the limit it is read; one deeper is refused, whichever parser would have taken it
    at_limit = post(
        reef, "/reef/report", json={"score": 1, "references": [receipt], "metadata": {"deep": nested(126)}}
    )
    assert at_limit.status_code == 200, at_limit.text
    over = post(
        reef, "/reef/report", json={"score": 1, "references": [receipt], "metadata": {"deep": nested(127)}}
    )
    assert over.status_code == 400
    over_nan = post(
        reef,
        "/reef/report",
        content=b'{"score": NaN, "references": [], "feedback": ' + b"[" * 200 + b"]" * 200 + b"}",
        headers={"content-type": "application/json"},
    )
    assert over_nan.status_code == 400 and "deeper than 128" in over_nan.json()["error"]["message"]
    assert len(git("-C", reef.repo("s"), "rev-list", "data").stdout.split()) == 2  # record + report
    assert data_tip(reef) != before


def test_the_nesting_limit_is_configurable_and_real_requests_pass(make_reef, upstream):
    reef = make_reef("--reef.max-json-depth", "8")
    tools = [
        {
            "type": "function",
            "function": {"name": f"t{i}", "parameters": {"type": "object", "properties": {}}},
        }
        for i in range(200)
    ]  # many brackets, shallow: a coding agent's request
    assert post(reef, "/v1/chat/completions", json={**CHAT, "tools": tools}).status_code == 200
    deep = post(reef, "/v1/chat/completions", json={**CHAT, "metadata": nested(8)})
    assert deep.status_code == 400 and "deeper than 8 levels" in deep.json()["error"]["message"]


BAD_REPORTS = [
    ({"score": 1, "references": ["rec_" + "0" * 28]}, "references[0]"),
    ({"score": 1, "references": ["not-an-id"]}, "references[0]"),
    ({"score": 1, "references": ["rep_" + "0" * 28]}, "references[0]"),
    ({"score": True, "references": []}, "score"),
    ({"score": "high", "references": []}, "score"),
    ({"feedback": 3, "references": []}, "feedback"),
    ({"score": 1, "references": "rec_x"}, "references"),
    ({"score": 1, "metadata": []}, "metadata"),
    ({"score": 1, "colour": "blue"}, "colour"),
    ({"references": []}, "score"),
]


@pytest.mark.parametrize("body, field", BAD_REPORTS)
def test_bad_reports_name_the_field_and_write_nothing(make_reef, body, field):
    reef = make_reef()
    receipt_of(reef)
    before = data_tip(reef)
    response = post(reef, "/reef/report", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == field
    assert data_tip(reef) == before


def test_report_on_another_scenarios_receipt_is_refused(make_reef):
    reef = make_reef()
    theirs = receipt_of(reef)
    post(reef, "/v1/chat/completions", headers={"x-reef-scenario": "other"}, json=CHAT)
    response = post(
        reef, "/reef/report", headers={"x-reef-scenario": "other"}, json={"score": 1, "references": [theirs]}
    )
    assert (
        response.status_code == 400
        and "not a record of scenario other" in response.json()["error"]["message"]
    )


def test_report_retries_are_idempotent_and_a_changed_retry_conflicts(make_reef):
    reef = make_reef()
    receipt = receipt_of(reef)
    body = {"score": 0.5, "feedback": "ok", "references": [receipt], "agent_record_id": "client-key-1"}
    first = post(reef, "/reef/report", json=body)
    again = post(reef, "/reef/report", json=body)
    assert first.status_code == again.status_code == 200
    assert first.json()["agent_record_id"] == again.json()["agent_record_id"]
    assert (first.json()["created"], again.json()["created"]) == (True, False)
    changed = post(reef, "/reef/report", json={**body, "score": 0.9})
    assert changed.status_code == 409 and changed.json()["error"]["param"] == "agent_record_id"
    assert reef.reader("s").data.counts()["report"] == 1


def test_capture_off_serves_without_recording_and_tags_are_stored(make_reef, upstream):
    reef = make_reef()
    served = post(reef, "/v1/chat/completions", headers={"x-reef-capture": "FALSE"}, json=CHAT)
    assert served.status_code == 200 and "x-reef-agent-record-id" not in served.headers
    assert data_tip(reef) is None
    tagged = post(
        reef,
        "/v1/chat/completions",
        json=CHAT,
        headers={"x-reef-tag-Session": "abc", "x-reef-tag-client": "pi", "x-reef-tag-empty": ""},
    )
    record = reef.reader("s").data.get(tagged.headers["x-reef-agent-record-id"]).data
    assert record["tags"] == {"session": "abc", "client": "pi"}


def test_query_string_and_beta_headers_reach_an_anthropic_upstream(make_reef, upstream):
    reef = make_reef(api="anthropic")
    response = post(
        reef,
        "/v1/messages?beta=true",
        json={**CHAT, "max_tokens": 5},
        headers={"anthropic-beta": "tools-2024", "anthropic-version": "2023-06-01"},
    )
    assert response.status_code == 200
    sent = upstream.requests[-1]
    assert sent.query == "beta=true" and sent.headers["anthropic-beta"] == "tools-2024"


def test_models_and_count_tokens(make_reef, upstream):
    oai = make_reef()
    listing = httpx.get(f"{oai.url}/v1/models").json()
    assert listing["data"][0]["id"] == "scripted-model"
    as_anthropic = httpx.get(f"{oai.url}/v1/models", headers={"anthropic-version": "2023-06-01"}).json()
    assert as_anthropic["data"][0]["type"] == "model"
    estimate = post(oai, "/v1/messages/count_tokens", json={**CHAT, "max_tokens": 5})
    assert estimate.status_code == 200 and estimate.json()["input_tokens"] >= 1
    assert estimate.headers["x-reef-estimate"] == "true"
    ant = make_reef(api="anthropic")
    assert post(ant, "/v1/messages/count_tokens", json=CHAT).json() == {"input_tokens": 42}


def test_upstream_down_is_502_and_timeout_is_504(make_reef, upstream):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    down = make_reef("--inference.upstream-url", dead)
    response = post(down, "/v1/chat/completions", json=CHAT)
    assert response.status_code == 502 and "unreachable" in response.json()["error"]["message"]
    slow = make_reef("--inference.timeout-s", "0.3")
    upstream.script(Delay(2.0, Text("too late")))
    response = post(slow, "/v1/messages", json={**CHAT, "max_tokens": 5})
    # 504, not the answer that comes after 2 s: reef gave up at its timeout
    assert response.status_code == 504 and response.json()["type"] == "error"
    assert [i.data["status"] for i in slow.reader("s").data.iter_items()] == [504]


def test_a_client_that_leaves_mid_stream_leaves_an_incomplete_record(make_reef, upstream):
    reef = make_reef()
    upstream.script(Slow("one two three four five six seven eight nine ten", interval=0.1))
    with httpx.stream(
        "POST", f"{reef.url}/v1/chat/completions", headers=H, json={**CHAT, "stream": True}, timeout=10
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data:") and "two" in line:
                break  # hang up mid-stream
    deadline = time.monotonic() + 5
    records = []
    while time.monotonic() < deadline and not records:
        time.sleep(0.1)
        records = list(reef.reader("s").data.iter_items()) if data_tip(reef) else []
    assert len(records) == 1
    assert records[0].data["complete"] is False and "client disconnected" in records[0].data["error"]


def test_scenario_routes(make_reef):
    reef = make_reef()
    created = httpx.post(f"{reef.url}/reef/scenarios", json={"name": "alpha"})
    assert created.status_code == 201 and created.json() == {"name": "alpha", "created": True}
    assert httpx.post(f"{reef.url}/reef/scenarios", json={"name": "alpha"}).status_code == 200
    assert httpx.post(f"{reef.url}/reef/scenarios", json={"name": "a/b"}).status_code == 400
    receipt = receipt_of(reef)
    names = [row["name"] for row in httpx.get(f"{reef.url}/reef/scenarios").json()["scenarios"]]
    assert names == ["alpha", "s"]
    listing = httpx.get(f"{reef.url}/reef/scenarios/s/records").json()
    assert [r["id"] for r in listing["records"]] == [receipt] and listing["next"] is None
    one = httpx.get(f"{reef.url}/reef/scenarios/s/records/{receipt}")
    assert one.json()["id"] == receipt
    assert httpx.get(f"{reef.url}/reef/scenarios/s/records/rec_{'0' * 28}").status_code == 404
    assert httpx.get(f"{reef.url}/reef/scenarios/s/records/nonsense").status_code == 400
    assert httpx.get(f"{reef.url}/reef/scenarios/s/records?limit=0").status_code == 400
    assert httpx.get(f"{reef.url}/reef/scenarios/nope/records").status_code == 404
    status = httpx.get(f"{reef.url}/reef/status").json()
    assert {row["name"]: row["counts"]["record"] for row in status["scenarios"]} == {"alpha": 0, "s": 1}
    archived = httpx.delete(f"{reef.url}/reef/scenarios/alpha")
    assert archived.status_code == 200 and "archive" in archived.json()["archived_to"]
    assert httpx.delete(f"{reef.url}/reef/scenarios/alpha").status_code == 404


def test_implicit_creation_can_be_turned_off(make_reef):
    reef = make_reef("--reef.implicit-scenarios", "false")
    response = post(reef, "/v1/chat/completions", json=CHAT)
    assert response.status_code == 404 and not (reef.state_dir / "scenarios" / "s.git").exists()
    httpx.post(f"{reef.url}/reef/scenarios", json={"name": "s"})
    assert post(reef, "/v1/chat/completions", json=CHAT).status_code == 200
