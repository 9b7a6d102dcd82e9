"""GET /reef/scenarios/{s}/sessions[/{session}]: records grouped by session tag, through the SDKs.

Two sessions interleave in one scenario: ``run-a`` (the openai SDK, tagged ``x-reef-tag-run`` as
reef-pi tags pi's requests: a tool call and its result in turn 1, a new user message opening
turn 2, streamed) and ``sess-b`` (the anthropic SDK to ``/v1/messages``, tagged
``x-reef-tag-session``: a tool_use and its tool_result in one turn), with an untagged request in
between, and reports from a judge and from people.
"""

from __future__ import annotations

from dataclasses import dataclass

import anthropic
import httpx
import openai
import pytest

from reef_core.client import ReefClient
from reef_core.errors import InvalidInput, NotFound
from tests.conftest import wait_for
from tests.fakes.upstream import Text, ToolCall

SCENARIO = "sessions"
SYSTEM = "You are a coding agent."
OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
ANTHROPIC_TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather for a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
TEST_FILE = "def test_sum():\n    assert 1 + 1 == 3"


@dataclass
class Sessions:
    reef: object
    a: list[str]  # run-a's receipts, in order
    b: list[str]  # sess-b's receipts
    untagged: str
    judge: str  # the judge's report on run-a
    person: str  # a person's report on run-a
    bad: str  # a person's /bad on sess-b

    def get(self, path: str = "", **params: object) -> httpx.Response:
        url = f"{self.reef.url}/reef/scenarios/{SCENARIO}/sessions{path}"
        return httpx.get(url, params=params, timeout=10)


def report(reef, body: dict) -> str:
    response = httpx.post(
        f"{reef.url}/reef/report", headers={"x-reef-scenario": SCENARIO}, json=body, timeout=10
    )
    assert response.status_code == 200, response.text
    return response.json()["agent_record_id"]


def record_count(reef) -> int:
    return sum(1 for _ in reef.reader(SCENARIO).data.iter_items(["record"]))


@pytest.fixture
def sessions(make_reef, upstream) -> Sessions:
    reef = make_reef()
    pi = openai.OpenAI(
        base_url=f"{reef.url}/v1",
        api_key="k",
        max_retries=0,
        timeout=20,
        default_headers={"x-reef-scenario": SCENARIO, "x-reef-tag-run": "run-a"},
    )
    claude = anthropic.Anthropic(
        base_url=reef.url,
        api_key="k",
        max_retries=0,
        timeout=20,
        default_headers={"x-reef-scenario": SCENARIO, "x-reef-tag-session": "sess-b"},
    )
    plain = openai.OpenAI(
        base_url=f"{reef.url}/v1",
        api_key="k",
        max_retries=0,
        timeout=20,
        default_headers={"x-reef-scenario": SCENARIO},
    )
    upstream.script(
        ToolCall("read_file", {"path": "test_sum.py"}, call_id="call_1"),
        ToolCall("get_weather", {"city": "Oslo"}, text="Let me look.", call_id="toolu_1"),
        Text("an untagged answer"),
        Text("The assertion is wrong: 1 + 1 is 2."),
        Text("It is -3C in Oslo."),
        Text("All tests pass."),
    )
    a, b = [], []

    # run-a, turn 1: the model calls a tool
    opening = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "fix the failing test"}]
    raw = pi.chat.completions.with_raw_response.create(model="m", messages=opening, tools=OPENAI_TOOLS)
    a.append(raw.headers["x-reef-agent-record-id"])
    call = raw.parse().choices[0].message.tool_calls[0]

    # sess-b, turn 1: the anthropic SDK, the model calls a tool
    question = {"role": "user", "content": "weather in Oslo?"}
    raw_b = claude.messages.with_raw_response.create(
        model="m", max_tokens=100, tools=ANTHROPIC_TOOLS, messages=[question]
    )
    b.append(raw_b.headers["x-reef-agent-record-id"])
    use = next(block for block in raw_b.parse().content if block.type == "tool_use")

    # no session tag: belongs to no session
    raw_plain = plain.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "untagged"}]
    )
    untagged = raw_plain.headers["x-reef-agent-record-id"]

    # run-a, still turn 1: the tool's output goes back
    with_result = [
        *opening,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": TEST_FILE},
    ]
    raw = pi.chat.completions.with_raw_response.create(model="m", messages=with_result, tools=OPENAI_TOOLS)
    a.append(raw.headers["x-reef-agent-record-id"])

    # sess-b, still turn 1: the tool_result block is the tool's words, not the user's
    raw_b = claude.messages.with_raw_response.create(
        model="m",
        max_tokens=100,
        tools=ANTHROPIC_TOOLS,
        messages=[
            question,
            {"role": "assistant", "content": [block.model_dump() for block in raw_b.parse().content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "-3C"}]},
        ],
    )
    b.append(raw_b.headers["x-reef-agent-record-id"])

    # run-a, turn 2: a new message from the user, streamed
    follow_up = [
        *with_result,
        {"role": "assistant", "content": "The assertion is wrong: 1 + 1 is 2."},
        {"role": "user", "content": "now run the tests"},
    ]
    chunks = list(pi.chat.completions.create(model="m", messages=follow_up, tools=OPENAI_TOOLS, stream=True))
    a.append(chunks[-1].model_extra["reef"]["agent_record_id"])
    assert wait_for(lambda: record_count(reef) == 6)

    judge = report(
        reef,
        {"score": 0, "references": a[:2], "metadata": {"source": "judge", "reason": "the user corrected it"}},
    )
    person = report(reef, {"score": 1, "references": a})
    bad = report(reef, {"score": 0, "feedback": "wrong city", "references": b})
    return Sessions(reef, a, b, untagged, judge, person, bad)


def test_sessions_group_interleaved_records_by_tag_in_both_formats(sessions):
    body = sessions.get().json()
    assert body["next"] is None
    run_a, sess_b = body["sessions"]
    assert run_a["session"] == "run-a" and run_a["records"] == sessions.a and len(sessions.a) == 3
    assert sess_b["session"] == "sess-b" and sess_b["records"] == sessions.b
    assert sessions.untagged not in run_a["records"] + sess_b["records"]
    assert run_a["started_at"] <= sess_b["started_at"] <= run_a["ended_at"]
    assert not run_a["continues"] and not sess_b["continues"]

    # OpenAI: [system, user, assistant(tool_calls), tool] stays in turn 1; a new user message opens turn 2
    assert [(t["user"], t["records"]) for t in run_a["turns"]] == [
        ("fix the failing test", sessions.a[:2]),
        ("now run the tests", sessions.a[2:]),
    ]
    assert [t["answer"] for t in run_a["turns"]] == ["The assertion is wrong: 1 + 1 is 2.", "All tests pass."]
    # Anthropic: a tool_result block is the tool's, so one turn
    [turn] = sess_b["turns"]
    assert turn["user"] == "weather in Oslo?" and turn["records"] == sessions.b
    assert turn["answer"] == "It is -3C in Oslo."


def test_explicit_reports_outweigh_the_judge(sessions):
    run_a, sess_b = sessions.get().json()["sessions"]
    assert [(r["id"], r["source"]) for r in run_a["reports"]] == [
        (sessions.judge, "judge"),
        (sessions.person, "person"),
    ]
    assert run_a["score"] == 1 and run_a["scored_by"] == "person" and run_a["negative"] is False
    assert [r["id"] for r in sess_b["reports"]] == [sessions.bad]
    assert sess_b["score"] == 0 and sess_b["scored_by"] == "person" and sess_b["negative"] is True
    assert sess_b["reports"][0]["feedback"] == "wrong city"


def test_one_session_with_its_transcript(sessions):
    run_a = sessions.get("/run-a").json()
    assert run_a["records"] == sessions.a and len(run_a["turns"]) == 2
    transcript = [(m["source"], m["text"]) for m in run_a["transcript"]]
    assert [source for source, _ in transcript] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert transcript[3] == ("tool", TEST_FILE)  # the file's contents are the tool's, not the user's
    assert transcript[2][1].startswith("[tool call read_file(")
    assert transcript[-1] == ("assistant", "All tests pass.")

    sess_b = sessions.get("/sess-b").json()
    assert [(m["source"], m["text"]) for m in sess_b["transcript"]] == [
        ("user", "weather in Oslo?"),
        ("assistant", 'Let me look.\n[tool call get_weather({"city": "Oslo"})]'),
        ("tool", "-3C"),
        ("assistant", "It is -3C in Oslo."),
    ]


def test_pages_start_with_the_session_left_out_whole(sessions):
    first = sessions.get(limit=1).json()
    assert [s["session"] for s in first["sessions"]] == ["run-a"]
    assert first["sessions"][0]["records"] == sessions.a  # whole: its later records too
    assert first["next"] == sessions.a[0]  # the item just before sess-b's first record

    second = sessions.get(after=first["next"], limit=1).json()
    [sess_b] = second["sessions"]
    assert sess_b["session"] == "sess-b" and sess_b["records"] == sessions.b and not sess_b["continues"]
    assert second["next"] == sessions.untagged  # the item just before run-a's next record

    # page on to the end: a session cut by a cursor comes back with its later records, continuing
    shown, cursor = [], second["next"]
    while cursor is not None:
        page = sessions.get(after=cursor, limit=1).json()
        shown += [(s["session"], s["records"], s["continues"]) for s in page["sessions"]]
        assert page["next"] is None or page["next"] > cursor
        cursor = page["next"]
    a, b = sessions.a, sessions.b
    assert shown == [("run-a", a[1:], True), ("sess-b", b[1:], True), ("run-a", a[2:], True)]


def test_after_inside_a_session_marks_it_continues(sessions):
    sess_b, run_a = sessions.get(after=sessions.a[0]).json()["sessions"]  # by first record after it
    assert run_a["session"] == "run-a" and run_a["continues"] is True
    assert run_a["records"] == sessions.a[1:]
    assert sess_b["continues"] is False
    one = sessions.get("/run-a", after=sessions.a[1]).json()
    assert one["continues"] is True and one["records"] == sessions.a[2:]
    assert one["transcript"][-1]["text"] == "All tests pass."


def test_the_client_reads_the_same(sessions):
    with ReefClient(sessions.reef.url) as client:
        assert client.sessions(SCENARIO) == sessions.get().json()
        page = client.sessions(SCENARIO, limit=1, after=sessions.a[0])
        assert [s["session"] for s in page["sessions"]] == ["sess-b"]
        assert client.session(SCENARIO, "sess-b") == sessions.get("/sess-b").json()
        with pytest.raises(NotFound, match="nope"):
            client.session(SCENARIO, "nope")
        with pytest.raises(InvalidInput):
            client.sessions(SCENARIO, after="rec_bad")


def test_a_session_named_with_url_characters(make_reef):
    reef = make_reef()
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"x-reef-scenario": SCENARIO, "x-reef-tag-session": "feature/x 1?#"}
    response = httpx.post(f"{reef.url}/v1/chat/completions", headers=headers, json=body, timeout=10)
    assert response.status_code == 200, response.text
    with ReefClient(reef.url) as client:
        assert [s["session"] for s in client.sessions(SCENARIO)["sessions"]] == ["feature/x 1?#"]
        one = client.session(SCENARIO, "feature/x 1?#")
        assert one["records"] == [response.headers["x-reef-agent-record-id"]]


def test_claude_codes_session_header_groups_its_requests(make_reef):
    reef = make_reef()
    headers = {
        "x-reef-scenario": SCENARIO,
        "x-claude-code-session-id": "0b9f4c1e-cc",
        "anthropic-version": "2023-06-01",
    }
    body = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    first = httpx.post(f"{reef.url}/v1/messages", headers=headers, json=body, timeout=10)
    body["messages"] += [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "more"}]
    second = httpx.post(f"{reef.url}/v1/messages", headers=headers, json=body, timeout=10)
    assert first.status_code == second.status_code == 200
    with ReefClient(reef.url) as client:
        [one] = client.sessions(SCENARIO)["sessions"]
    assert one["session"] == "0b9f4c1e-cc" and len(one["turns"]) == 2
    assert one["records"] == [r.headers["x-reef-agent-record-id"] for r in (first, second)]


def test_bad_input_and_unknown_names(sessions):
    bad = sessions.get(after="rec_nope")
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "after"
    assert sessions.get("/run-a", after="nope").json()["error"]["param"] == "after"
    for limit in ("0", "1001", "x"):
        assert sessions.get(limit=limit).json()["error"]["param"] == "limit"
    missing = sessions.get("/no-such-session")
    assert missing.status_code == 404 and "no-such-session" in missing.json()["error"]["message"]
    assert missing.json()["error"]["param"] == "session"
    # a session whose records are all before the cursor is not found after it
    assert sessions.get("/sess-b", after=sessions.b[-1]).status_code == 404
    # the untagged record is in no session
    assert sessions.get(after=sessions.a[-1]).json() == {"sessions": [], "next": None}
    url = f"{sessions.reef.url}/reef/scenarios/nope/sessions"
    assert httpx.get(url, timeout=10).status_code == 404
    assert httpx.get(f"{url}/run-a", timeout=10).status_code == 404
