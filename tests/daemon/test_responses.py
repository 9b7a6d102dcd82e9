"""The official openai SDK's ``client.responses`` and ``client.embeddings`` through reef.

Over an upstream that has ``/v1/responses`` (forwarded as sent) and over one with only chat
completions (translated; reef notes the 404 and asks chat completions from then on), and over
an Anthropic upstream (translated twice).  The scripted upstream is real HTTP and SSE.
"""

from __future__ import annotations

import json
import os

import httpx
import openai
import pytest

from reef_core.ids import parse_item_id
from tests.cli.support import reef as reef_cli
from tests.conftest import git
from tests.fakes.upstream import Error, Reset, Text, ToolCall

SCENARIO = "resp"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
# forwarded: the upstream has /v1/responses; chat: it has only chat completions; anthropic
KINDS = ["forwarded", "chat", "anthropic"]


def client(reef) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{reef.url}/v1",
        api_key="client-key",
        max_retries=0,
        timeout=20,
        default_headers={"x-reef-scenario": SCENARIO},
    )


@pytest.fixture
def reef_for(make_reef, upstream):
    def make(kind: str, *flags: str):
        upstream.responses_api = kind == "forwarded"
        return make_reef(*flags, api="anthropic" if kind == "anthropic" else "openai")

    return make


def record(reef, receipt: str) -> dict:
    parse_item_id(receipt)
    return reef.reader(SCENARIO).data.get(receipt).data


def inference_paths(upstream) -> list[str]:
    return [r.path for r in upstream.requests if r.method == "POST"]


def data_log(reef) -> list[str]:
    result = git("-C", reef.repo(SCENARIO), "log", "--format=%s", "data", check=False)
    return result.stdout.splitlines() if result.returncode == 0 else []


# -- not streamed --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_create_answers_with_output_text_and_the_receipt_header(reef_for, upstream, kind):
    reef = reef_for(kind)
    upstream.script(Text("the answer is 42", usage=(12, 4)))
    raw = client(reef).responses.with_raw_response.create(
        model="m1", instructions="be brief", input="what is the answer?"
    )
    response = raw.parse()
    assert response.output_text == "the answer is 42"
    assert response.status == "completed"
    assert response.usage.input_tokens == 12 and response.usage.output_tokens == 4
    receipt = raw.headers["x-reef-agent-record-id"]
    stored = record(reef, receipt)
    assert stored["route"] == "responses" and stored["client_format"] == "responses"
    assert stored["request"] == {"model": "m1", "instructions": "be brief", "input": "what is the answer?"}
    assert stored["response"]["id"] == response.id and stored["status"] == 200 and stored["complete"]
    assert (
        stored["upstream_format"]
        == {"forwarded": "responses", "chat": "openai", "anthropic": "anthropic"}[kind]
    )
    sent = upstream.requests[-1]
    if kind == "forwarded":
        assert sent.path == "/v1/responses" and sent.body == stored["request"]
    elif kind == "chat":
        assert sent.path == "/v1/chat/completions"
        assert sent.body["messages"] == [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "what is the answer?"},
        ]
    else:
        assert sent.path == "/v1/messages" and sent.body["system"] == "be brief"


@pytest.mark.parametrize("kind", KINDS)
def test_a_tool_call_round_trip_with_function_call_output(reef_for, upstream, kind):
    reef = reef_for(kind)
    upstream.script(ToolCall("get_weather", {"city": "Oslo"}, call_id="call_7"), Text("4 degrees in Oslo"))
    sdk = client(reef)
    first = sdk.responses.create(model="m1", input="weather in Oslo?", tools=[WEATHER])
    calls = [item for item in first.output if item.type == "function_call"]
    assert [(c.name, json.loads(c.arguments), c.call_id) for c in calls] == [
        ("get_weather", {"city": "Oslo"}, "call_7")
    ]
    follow_up = [
        {"role": "user", "content": "weather in Oslo?"},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "call_id": "call_7", "output": '{"celsius": 4}'},
    ]
    raw = sdk.responses.with_raw_response.create(model="m1", input=follow_up, tools=[WEATHER])
    assert raw.parse().output_text == "4 degrees in Oslo"
    stored = record(reef, raw.headers["x-reef-agent-record-id"])
    assert stored["request"]["input"][-1]["type"] == "function_call_output"
    sent = upstream.requests[-1].body
    if kind == "chat":  # the call and its output became an assistant turn and a tool message
        assert sent["messages"][1]["tool_calls"][0]["id"] == "call_7"
        assert sent["messages"][2] == {"role": "tool", "tool_call_id": "call_7", "content": '{"celsius": 4}'}
        assert sent["tools"][0]["function"]["name"] == "get_weather"
    elif kind == "anthropic":
        assert sent["messages"][1]["content"][-1]["type"] == "tool_use"
        assert sent["messages"][2]["content"][0]["tool_use_id"] == "call_7"


def test_an_upstream_without_responses_is_asked_once_then_translated(reef_for, upstream):
    reef = reef_for("chat")
    upstream.script(Text("one"), Text("two"))
    sdk = client(reef)
    assert sdk.responses.create(model="m", input="a").output_text == "one"
    assert sdk.responses.create(model="m", input="b").output_text == "two"
    assert inference_paths(upstream) == ["/v1/responses", "/v1/chat/completions", "/v1/chat/completions"]
    assert len(data_log(reef)) == 2  # the 404 that taught reef is no record


def test_a_501_also_says_the_route_is_missing_but_a_missing_model_does_not(reef_for, upstream):
    reef = reef_for("forwarded")
    upstream.script(Error(404, "The model 'nope' does not exist", "model_not_found"))
    with pytest.raises(openai.NotFoundError):
        client(reef).responses.create(model="nope", input="a")
    upstream.script(Error(501, "not implemented", "server_error"), Text("via chat"))
    assert client(reef).responses.create(model="m", input="a").output_text == "via chat"
    assert inference_paths(upstream) == ["/v1/responses", "/v1/responses", "/v1/chat/completions"]


@pytest.mark.parametrize(
    ("mode", "paths"), [("translate", ["/v1/chat/completions"]), ("forward", ["/v1/responses"])]
)
def test_the_setting_chooses_the_way(reef_for, upstream, mode, paths):
    reef = reef_for("forwarded", "--inference.responses", mode)
    upstream.script(Text("fine"))
    assert client(reef).responses.create(model="m", input="a").output_text == "fine"
    assert inference_paths(upstream) == paths


def test_forward_relays_the_404_of_an_upstream_without_responses(reef_for, upstream):
    reef = reef_for("chat", "--inference.responses", "forward")
    with pytest.raises(openai.NotFoundError):
        client(reef).responses.create(model="m", input="a")
    assert inference_paths(upstream) == ["/v1/responses"]


@pytest.mark.parametrize("kind", KINDS)
def test_upstream_4xx_reaches_the_client_in_the_openai_envelope(reef_for, upstream, kind):
    reef = reef_for(kind)
    upstream.script(Error(429, "slow down", "rate_limit_error"))
    with pytest.raises(openai.RateLimitError) as caught:
        client(reef).responses.create(model="m", input="a")
    assert caught.value.status_code == 429
    assert caught.value.body["message"] == "slow down"
    assert [item.data["status"] for item in reef.reader(SCENARIO).data.iter_items()] == [429]


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        (
            {"model": "m", "input": "a", "previous_response_id": "resp_1"},
            "previous_response_id",
            "previous_response_id",
        ),
        (
            {"model": "m", "input": "a", "tools": [{"type": "web_search"}], "tool_choice": "required"},
            "tool_choice",
            "none of the tools can run on this upstream",
        ),
        (
            {"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]},
            "input[0].type",
            "item_reference",
        ),
        ({"model": "m", "input": 7}, "input", "input must be"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_nothing_is_recorded(reef_for, upstream, body, field, says):
    reef = reef_for("chat", "--inference.responses", "translate")
    answer = httpx.post(
        f"{reef.url}/v1/responses", json=body, headers={"x-reef-scenario": SCENARIO}, timeout=10
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == field and says in error["message"]
    assert inference_paths(upstream) == [] and not os.path.exists(reef.repo(SCENARIO))


@pytest.mark.parametrize("kind", ["chat", "anthropic"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_codex_s_tools_reach_an_upstream_without_responses_and_its_call_comes_back_namespaced(
    reef_for, upstream, kind, stream
):
    """What Codex sends: a namespace of tools (offered flat, called back under its own name and
    namespace) and a hosted tool (left out, and the record says so), on both translated legs."""
    reef = reef_for(kind)
    spawn = {"type": "function", "name": "spawn_agent", "parameters": {"type": "object", "properties": {}}}
    upstream.script(ToolCall("multi_agent_v1__spawn_agent", {"message": "look"}, call_id="call_s"))
    request = {
        "model": "m",
        "input": "start a helper",
        "tools": [{"type": "namespace", "name": "multi_agent_v1", "tools": [spawn]}, {"type": "web_search"}],
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "reasoning": {"summary": "auto"},
    }
    if stream:
        events = list(client(reef).responses.create(**request, stream=True))
        receipt = events[-1].response.model_extra["reef"]["agent_record_id"]
        response = events[-1].response
    else:
        response = client(reef).responses.create(**request)
        receipt = (
            response.model_extra["reef"]["agent_record_id"] if response.model_extra.get("reef") else None
        )
    [call] = response.output
    assert (call.type, call.name, call.to_dict()["namespace"], call.call_id) == (
        "function_call",
        "spawn_agent",
        "multi_agent_v1",
        "call_s",
    )
    sent = upstream.requests[-1].body
    names = (
        [t["function"]["name"] for t in sent["tools"]]
        if kind == "chat"
        else [t["name"] for t in sent["tools"]]
    )
    assert names == ["multi_agent_v1__spawn_agent"]
    # nothing OpenAI keeps for itself goes on, and an Anthropic upstream is not asked to think
    assert not {"store", "include", "thinking", "reasoning"} & set(sent)
    kept = reef.reader(SCENARIO).data
    [stored] = [item.data for item in kept.iter_items(["record"])]
    assert receipt is None or stored["id"] == receipt
    assert stored["complete"] and sorted((x["field"], x["kind"]) for x in stored["left_out"]) == [
        ("include", "setting"),
        ("store", "setting"),
        ("tools[1]", "web_search"),
    ]


# -- streamed ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_stream_ends_with_the_receipt_on_response_completed(reef_for, upstream, kind):
    reef = reef_for(kind)
    upstream.script(Text("streamed words arrive one by one"))
    events = list(client(reef).responses.create(model="m1", input="hi", stream=True))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert [e.sequence_number for e in events] == sorted(e.sequence_number for e in events)
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "streamed words arrive one by one"
    receipt = events[-1].reef["agent_record_id"]
    stored = record(reef, receipt)
    assert stored["stream"] is True and stored["complete"] is True
    assert stored["request"] == {"model": "m1", "input": "hi", "stream": True}
    final = events[-1].response.model_dump(exclude_none=True)
    final.pop("reef")
    assert stored["response"]["output"] == json.loads(json.dumps(final["output"]))
    assert stored["response"]["id"] == events[0].response.id == events[-1].response.id


@pytest.mark.parametrize("kind", KINDS)
def test_the_sdk_stream_helper_accepts_the_events_and_gets_the_final_response(reef_for, upstream, kind):
    reef = reef_for(kind)
    upstream.script(ToolCall("get_weather", {"city": "Oslo"}, text="Let me look.", call_id="call_9"))
    with client(reef).responses.stream(model="m1", input="weather in Oslo?", tools=[WEATHER]) as stream:
        seen = [event.type for event in stream]
        final = stream.get_final_response()
    assert seen[:2] == ["response.created", "response.in_progress"] and seen[-1] == "response.completed"
    assert final.output_text == "Let me look."
    call = next(item for item in final.output if item.type == "function_call")
    assert (call.call_id, json.loads(call.arguments)) == ("call_9", {"city": "Oslo"})
    receipt = final.reef["agent_record_id"]  # the helper rebuilds the event; the response keeps it
    stored = record(reef, receipt)
    assert [item["type"] for item in stored["response"]["output"]] == ["message", "function_call"]
    assert stored["response"]["output"][1]["arguments"] == '{"city":"Oslo"}'


@pytest.mark.parametrize("kind", ["forwarded", "chat"])
def test_a_stream_cut_mid_way_fails_with_the_receipt_and_an_incomplete_record(reef_for, upstream, kind):
    reef = reef_for(kind, "--inference.responses", "forward" if kind == "forwarded" else "translate")
    upstream.script(Reset(after_chunks=4))
    events = list(client(reef).responses.create(model="m1", input="hi", stream=True))
    assert events[0].type == "response.created"
    assert events[-1].type == "response.failed"
    stored = record(reef, events[-1].reef["agent_record_id"])
    assert stored["complete"] is False and stored["error"]
    assert stored["response"]["id"] == events[0].response.id


# -- read back: sessions, export ------------------------------------------------------------


def test_responses_records_read_as_sessions_and_export_in_chat_form(reef_for, upstream):
    reef = reef_for("chat")
    upstream.script(ToolCall("get_weather", {"city": "Oslo"}, call_id="call_7"), Text("4 degrees in Oslo"))
    sdk = client(reef).with_options(default_headers={"x-reef-scenario": SCENARIO, "x-reef-tag-session": "s1"})
    first = sdk.responses.create(
        model="m1", instructions="be brief", input="weather in Oslo?", tools=[WEATHER]
    )
    follow_up = [
        {"role": "user", "content": "weather in Oslo?"},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "call_id": "call_7", "output": "4"},
    ]
    sdk.responses.create(model="m1", instructions="be brief", input=follow_up, tools=[WEATHER])
    session = httpx.get(f"{reef.url}/reef/scenarios/{SCENARIO}/sessions/s1", timeout=10).json()
    assert len(session["turns"]) == 1 and len(session["records"]) == 2
    assert [(m["source"], m["text"]) for m in session["transcript"]] == [
        ("system", "be brief"),
        ("user", "weather in Oslo?"),
        ("assistant", '[tool call get_weather({"city":"Oslo"})]'),
        ("tool", "4"),
        ("assistant", "4 degrees in Oslo"),
    ]
    result = reef_cli("export", SCENARIO, "--url", reef.url)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["format"] for line in lines] == ["openai", "openai"]
    assert lines[1]["messages"][-1] == {"role": "tool", "tool_call_id": "call_7", "content": "4"}
    assert lines[1]["tools"][0]["function"]["name"] == "get_weather"
    assert lines[0]["answer"]["tool_calls"][0]["id"] == "call_7"
    assert lines[1]["answer"] == {"role": "assistant", "content": "4 degrees in Oslo"}


# -- embeddings ----------------------------------------------------------------------------


def test_embeddings_are_forwarded_and_recorded(make_reef, upstream):
    reef = make_reef()
    raw = client(reef).embeddings.with_raw_response.create(model="embed-1", input=["one", "two words"])
    vectors = raw.parse()
    assert [len(d.embedding) for d in vectors.data] == [8, 8]
    stored = record(reef, raw.headers["x-reef-agent-record-id"])
    assert stored["route"] == "embeddings" and stored["status"] == 200 and stored["complete"]
    assert stored["request"]["input"] == ["one", "two words"] and stored["model"] == "embed-1"
    assert len(stored["response"]["data"]) == 2
    assert upstream.requests[-1].path == "/v1/embeddings"
    exported = reef_cli("export", SCENARIO, "--url", reef.url)  # no messages: nothing to learn from
    assert exported.exit_code == 0 and exported.stdout == ""
    assert upstream.requests[-1].body["model"] == "embed-1"
    assert (
        "Reef-Route: embeddings" in git("-C", reef.repo(SCENARIO), "log", "-1", "--format=%B", "data").stdout
    )


def test_embeddings_without_capture_are_not_recorded(make_reef, upstream):
    reef = make_reef()
    sdk = client(reef).with_options(default_headers={"x-reef-scenario": SCENARIO, "x-reef-capture": "false"})
    raw = sdk.embeddings.with_raw_response.create(model="embed-1", input="one")
    assert len(raw.parse().data) == 1 and "x-reef-agent-record-id" not in raw.headers
    assert data_log(reef) == []


def test_embeddings_on_an_anthropic_upstream_are_a_400_naming_the_reason(make_reef, upstream):
    reef = make_reef(api="anthropic")
    with pytest.raises(openai.BadRequestError) as caught:
        client(reef).embeddings.create(model="embed-1", input="one")
    assert "anthropic, which has no embeddings" in caught.value.message
    assert upstream.requests == [] and data_log(reef) == []
