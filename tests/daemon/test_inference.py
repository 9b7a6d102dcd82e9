"""The official SDKs through reef, against both upstream formats: what a real client sees."""

from __future__ import annotations

import json
import time

import anthropic
import httpx
import openai
import pytest

from reef_core.ids import parse_item_id
from tests.conftest import git
from tests.fakes.upstream import Error, Reset, Slow, Text, ToolCall

SCENARIO = "sdk"
TOOL = {
    "name": "get_weather",
    "description": "Weather for a city",
    "schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def openai_client(reef) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{reef.url}/v1",
        api_key="client-key",
        max_retries=0,
        timeout=20,
        default_headers={"x-reef-scenario": SCENARIO},
    )


def anthropic_client(reef) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=reef.url,
        api_key="client-key",
        max_retries=0,
        timeout=20,
        default_headers={"x-reef-scenario": SCENARIO},
    )


def report(reef, receipt: str, score: float = 1.0) -> httpx.Response:
    return httpx.post(
        f"{reef.url}/reef/report",
        headers={"x-reef-scenario": SCENARIO},
        json={"score": score, "references": [receipt]},
        timeout=10,
    )


def assert_recorded(reef, receipt: str, *, complete: bool = True) -> dict:
    record = reef.reader(SCENARIO).data.get(receipt).data
    assert record["complete"] is complete
    response = report(reef, receipt)
    assert response.status_code == 200, response.text
    log = git("-C", reef.repo(SCENARIO), "log", "--format=%s", "data").stdout.splitlines()
    assert log[0].startswith(f"report {response.json()['agent_record_id']} score=1 refs={receipt}")
    assert any(line.startswith(f"record {receipt} ") for line in log)
    return record


APIS = ["openai", "anthropic"]


@pytest.mark.parametrize("api", APIS)
def test_openai_client_non_stream(make_reef, upstream, api):
    reef = make_reef(api=api)
    upstream.script(Text("the answer is 42"))
    raw = openai_client(reef).chat.completions.with_raw_response.create(
        model="m1", messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "the answer is 42"
    assert completion.choices[0].finish_reason == "stop"
    receipt = raw.headers["x-reef-agent-record-id"]
    record = assert_recorded(reef, receipt)
    assert record["request"]["messages"][1]["content"] == "hi" and record["status"] == 200
    assert record["upstream_format"] == api
    sent = upstream.requests[-1]
    assert sent.path.endswith("/chat/completions" if api == "openai" else "/messages")
    if api == "anthropic":  # translated: system prompt moved to the top level
        assert "be brief" in json.dumps(sent.body["system"])


@pytest.mark.parametrize("api", APIS)
def test_openai_client_stream_gets_its_receipt_last(make_reef, upstream, api):
    reef = make_reef(api=api)
    upstream.script(Text("streamed words arrive one by one"))
    stream = openai_client(reef).chat.completions.create(
        model="m1",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "streamed words arrive one by one"
    receipt = chunks[-1].model_extra["reef"]["agent_record_id"]
    assert chunks[-1].choices == []
    record = assert_recorded(reef, receipt)
    assert record["stream"] is True
    assert record["response"]["choices"][0]["message"]["content"] == text


@pytest.mark.parametrize("api", APIS)
def test_streamed_words_reach_the_client_as_the_upstream_sends_them(make_reef, upstream, api):
    reef = make_reef(api=api)
    upstream.script(Slow("one two three four five", interval=0.15))
    started = time.monotonic()
    arrivals = []
    stream = openai_client(reef).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "count"}], stream=True
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(time.monotonic() - started)
    assert len(arrivals) >= 5
    # the first word is not held back until the last one is sent, 0.6 s later
    assert arrivals[-1] - arrivals[0] > 0.4


def test_a_stream_whose_first_event_is_slow_to_come_gets_its_headers_at_once(make_reef, upstream):
    """The status and headers wait for the first event (to go out in one send with it), but
    only briefly: a client whose model takes a while to start hears at once that it will."""
    reef = make_reef()
    upstream.script(Slow("thinking done", interval=0.0, first=60.0))
    body = {"model": "m", "messages": [{"role": "user", "content": "think"}], "stream": True}
    headers = {"x-reef-scenario": SCENARIO}
    # the first event is a minute away: headers held for it would time this client out
    with httpx.stream("POST", f"{reef.url}/v1/chat/completions", json=body, headers=headers, timeout=20) as r:
        assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"


@pytest.mark.parametrize("api", APIS)
def test_openai_client_tool_calls(make_reef, upstream, api):
    reef = make_reef(api=api)
    tools = [
        {
            "type": "function",
            "function": {
                "name": TOOL["name"],
                "description": TOOL["description"],
                "parameters": TOOL["schema"],
            },
        }
    ]
    client = openai_client(reef)
    upstream.script(
        ToolCall("get_weather", {"city": "Lisbon"}, call_id="call_1"),
        ToolCall("get_weather", {"city": "Porto"}, call_id="call_2"),
    )
    message = (
        client.chat.completions.create(
            model="m1", messages=[{"role": "user", "content": "weather?"}], tools=tools
        )
        .choices[0]
        .message
    )
    assert message.tool_calls[0].function.name == "get_weather"
    assert json.loads(message.tool_calls[0].function.arguments) == {"city": "Lisbon"}
    stream = client.chat.completions.create(
        model="m1", messages=[{"role": "user", "content": "weather?"}], tools=tools, stream=True
    )
    chunks = list(stream)
    calls: dict[int, str] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or []:
                calls[call.index] = calls.get(call.index, "") + (call.function.arguments or "")
    assert json.loads(calls[0]) == {"city": "Porto"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "tool_calls"
    ]
    # the tool result goes back through reef too
    upstream.script(Text("It is sunny in Lisbon."))
    answer = client.chat.completions.create(
        model="m1",
        tools=tools,
        messages=[
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": None, "tool_calls": [message.tool_calls[0].model_dump()]},
            {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "sunny"},
        ],
    )
    assert answer.choices[0].message.content == "It is sunny in Lisbon."
    if api == "anthropic":
        blocks = upstream.requests[-1].body["messages"][-1]["content"]
        assert blocks[0]["type"] == "tool_result" and blocks[0]["tool_use_id"] == message.tool_calls[0].id


@pytest.mark.parametrize("api", APIS)
def test_anthropic_client_non_stream(make_reef, upstream, api):
    reef = make_reef(api=api)
    upstream.script(Text("hello from upstream"))
    raw = anthropic_client(reef).messages.with_raw_response.create(
        model="m2", max_tokens=100, system="be brief", messages=[{"role": "user", "content": "hi"}]
    )
    message = raw.parse()
    assert message.content[0].text == "hello from upstream" and message.stop_reason == "end_turn"
    record = assert_recorded(reef, raw.headers["x-reef-agent-record-id"])
    assert record["client_format"] == "anthropic"
    if api == "openai":
        assert upstream.requests[-1].body["messages"][0] == {"role": "system", "content": "be brief"}


@pytest.mark.parametrize("api", APIS)
def test_anthropic_client_stream_gets_its_receipt_on_message_stop(make_reef, upstream, api):
    reef = make_reef(api=api)
    upstream.script(Text("a streamed anthropic answer"))
    client = anthropic_client(reef)
    # the raw event stream: the SDK's stream helper rebuilds message_stop and drops extra fields
    events = list(
        client.messages.create(
            model="m2", max_tokens=100, messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert text == "a streamed anthropic answer"
    stop = [e for e in events if e.type == "message_stop"]
    assert len(stop) == 1 and events[-1] is stop[0]
    receipt = stop[0].model_extra["reef"]["agent_record_id"]
    record = assert_recorded(reef, receipt)
    assert record["response"]["content"][0]["text"] == text
    upstream.script(Text("and the helper parses it too"))
    with client.messages.stream(
        model="m2", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
    ) as s:
        assert s.get_final_message().content[0].text == "and the helper parses it too"


@pytest.mark.parametrize("api", APIS)
def test_anthropic_client_tool_use(make_reef, upstream, api):
    reef = make_reef(api=api)
    tools = [{"name": TOOL["name"], "description": TOOL["description"], "input_schema": TOOL["schema"]}]
    upstream.script(
        ToolCall("get_weather", {"city": "Oslo"}, text="Let me check.", call_id="toolu_1"),
        ToolCall("get_weather", {"city": "Bergen"}, call_id="toolu_2"),
    )
    client = anthropic_client(reef)
    message = client.messages.create(
        model="m2", max_tokens=100, tools=tools, messages=[{"role": "user", "content": "weather?"}]
    )
    uses = [b for b in message.content if b.type == "tool_use"]
    assert uses[0].name == "get_weather" and uses[0].input == {"city": "Oslo"}
    assert message.stop_reason == "tool_use"
    with client.messages.stream(
        model="m2", max_tokens=100, tools=tools, messages=[{"role": "user", "content": "weather?"}]
    ) as s:
        final = s.get_final_message()
    assert [b.input for b in final.content if b.type == "tool_use"] == [{"city": "Bergen"}]


@pytest.mark.parametrize("api", APIS)
def test_upstream_errors_reach_each_client_in_its_own_envelope(make_reef, upstream, api):
    reef = make_reef(api=api)
    upstream.script(
        Error(429, "slow down"),
        Error(400, "bad thing"),
        Error(500, "boom"),
        Error(429, "slow down"),
        Error(500, "boom"),
    )
    oai = openai_client(reef)
    with pytest.raises(openai.RateLimitError, match="slow down"):
        oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError, match="bad thing"):
        oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=True)
    with pytest.raises(openai.APIStatusError) as info:
        oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == 502
    ant = anthropic_client(reef)
    with pytest.raises(anthropic.RateLimitError, match="slow down"):
        ant.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    with pytest.raises(anthropic.APIStatusError) as info2:
        ant.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert info2.value.status_code == 502
    # failed exchanges are on the record too, with their status
    statuses = [item.data["status"] for item in reef.reader(SCENARIO).data.iter_items(["record"])]
    assert statuses == [429, 400, 502, 429, 502]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("client_format", ["openai", "anthropic"])
def test_upstream_reset_mid_stream_gives_a_clean_error_and_an_incomplete_record(
    make_reef, upstream, api, client_format
):
    reef = make_reef(api=api)
    upstream.script(Reset(after_chunks=3, text="this stream will be cut short by the upstream"))
    if client_format == "openai":
        with pytest.raises(openai.APIError):
            list(
                openai_client(reef).chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "x"}], stream=True
                )
            )
    else:
        with pytest.raises(anthropic.APIError):
            with anthropic_client(reef).messages.stream(
                model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]
            ) as s:
                list(s)
    records = list(reef.reader(SCENARIO).data.iter_items(["record"]))
    assert len(records) == 1
    assert records[0].data["complete"] is False and records[0].data["error"]


def test_a_large_request_on_many_lines_is_recorded_on_one_while_others_are_answered(make_reef, upstream):
    """Past 512 KB a request that cannot be stored as sent is serialised in a worker thread."""
    reef = make_reef(api="openai")
    body = {"model": "m1", "messages": [{"role": "user", "content": "y" * 600_000}]}
    upstream.script(Text("ok"))
    response = httpx.post(
        f"{reef.url}/v1/chat/completions",
        content=json.dumps(body, indent=2).encode(),
        headers={"x-reef-scenario": SCENARIO, "content-type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    receipt = response.headers["x-reef-agent-record-id"]
    stored = git("-C", reef.repo(SCENARIO), "cat-file", "blob", f"data:{parse_item_id(receipt).path}").stdout
    assert stored.count("\n") == 1
    assert reef.reader(SCENARIO).data.get(receipt).data["request"] == body
    assert_recorded(reef, receipt)


def test_the_record_keeps_the_request_byte_for_byte_as_the_client_sent_it(make_reef, upstream):
    reef = make_reef(api="openai")
    content = b'"caf\\u00e9 \xc3\xa9 \\ud83d\\ude00"'
    compact = b'{"model":"m1", "messages": [{"role":"user","content":%s}],"temperature":0.50}' % content
    pretty = json.dumps({"model": "m1", "messages": [{"role": "user", "content": "hi"}]}, indent=2).encode()
    # past the size the daemon would serialise in a thread, and the writer writes in its own
    large = json.dumps({"model": "m1", "messages": [{"role": "user", "content": "x" * 600_000}]}).encode()
    receipts = []
    for body in (compact, pretty, large):
        upstream.script(Text("ok"))
        response = httpx.post(
            f"{reef.url}/v1/chat/completions",
            content=body,
            headers={"x-reef-scenario": SCENARIO, "content-type": "application/json"},
            timeout=10,
        )
        assert response.status_code == 200, response.text
        receipts.append(response.headers["x-reef-agent-record-id"])
    for receipt, body in zip(receipts, (compact, pretty, large), strict=True):
        record = reef.reader(SCENARIO).data.get(receipt)
        path = f"data:{parse_item_id(receipt).path}"
        stored = git("-C", reef.repo(SCENARIO), "cat-file", "blob", path).stdout.encode()
        assert stored.count(b"\n") == 1  # a record is one line, whatever the client sent
        assert record.data["request"] == json.loads(body)
        if body is not pretty:  # stored as sent: spacing, number spelling, escapes and all
            assert b'"request":' + body + b"," in stored


def test_a_stream_that_cannot_be_assembled_is_recorded_incomplete_and_warned(
    make_reef, upstream, monkeypatch, caplog
):
    """A finished stream whose answer cannot be put together is stored with no response: it
    must say so (incomplete, with why) and warn, not pass for a complete record."""
    from reef_core.daemon import relay

    def broken(self):
        raise ValueError("two message starts")

    monkeypatch.setattr(relay.StreamRelay, "assembled", broken)
    reef = make_reef()
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with caplog.at_level("WARNING"):
        with httpx.stream(
            "POST", f"{reef.url}/v1/chat/completions", json=body, headers={"x-reef-scenario": "s"}, timeout=10
        ) as answer:
            assert answer.status_code == 200
            list(answer.iter_lines())
    [row] = httpx.get(f"{reef.url}/reef/scenarios/s/records", timeout=10).json()["records"]
    record = reef.reader("s").data.get(row["id"]).data
    assert record["complete"] is False and record["response"] is None
    assert "could not be assembled into one answer: two message starts" in record["error"]
    assert any("recorded incomplete" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
