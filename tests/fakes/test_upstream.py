"""The scripted upstream speaks real HTTP and SSE: the official SDKs accept everything it says."""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from tests.fakes.upstream import (
    Delay,
    Error,
    Hang,
    Reset,
    ScriptedUpstream,
    Slow,
    Text,
    ToolCall,
    free_port,
    upstream_fixture,  # noqa: F401 - the fixture under test, named `upstream`
)

MESSAGES = [{"role": "user", "content": "hi"}]
TOOLS_OPENAI = [
    {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
    }
]
TOOLS_ANTHROPIC = [{"name": "get_weather", "input_schema": {"type": "object", "properties": {}}}]
ARGS = {"city": "Paris", "days": 3, "units": ["c", "f"], "note": "long enough to split"}


@pytest.fixture
def oai(upstream: ScriptedUpstream) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=upstream.url + "/v1", api_key="x", timeout=3.0, max_retries=0) as client:
        yield client


@pytest.fixture
def ant(upstream: ScriptedUpstream) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=upstream.url, api_key="x", timeout=3.0, max_retries=0) as client:
        yield client


def ant_create(client: anthropic.Anthropic, **kwargs: object) -> anthropic.types.Message:
    return client.messages.create(model="claude-x", max_tokens=64, messages=MESSAGES, **kwargs)  # type: ignore[arg-type, call-overload]


# ------------------------------------------------------------------------------------------ OpenAI


def test_openai_non_stream(upstream: ScriptedUpstream, oai: openai.OpenAI) -> None:
    upstream.script(Text("Bonjour le monde", usage=(7, 3)))
    reply = oai.chat.completions.create(model="gpt-x", messages=MESSAGES)  # type: ignore[arg-type]
    assert reply.id == "chatcmpl-1"
    assert reply.model == "gpt-x"
    assert reply.choices[0].message.content == "Bonjour le monde"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None and (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (7, 3)
    [seen] = upstream.requests
    assert (seen.method, seen.path, seen.query) == ("POST", "/v1/chat/completions", "")
    assert seen.headers["authorization"] == "Bearer x"
    assert seen.body is not None and seen.body["messages"] == MESSAGES
    assert json.loads(seen.raw) == seen.body


def test_openai_stream_with_usage(upstream: ScriptedUpstream, oai: openai.OpenAI) -> None:
    upstream.script(Text("one two  three four", stop="length"))
    chunks = list(
        oai.chat.completions.create(
            model="gpt-x",
            messages=MESSAGES,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "one two  three four"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 4  # one per word
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 15
    assert {c.model for c in chunks} == {"gpt-x"}


def test_openai_tool_call(upstream: ScriptedUpstream, oai: openai.OpenAI) -> None:
    upstream.script(
        ToolCall("get_weather", ARGS, call_id="call_abc"),
        ToolCall("get_weather", ARGS, text="Let me check. "),
    )
    reply = oai.chat.completions.create(model="gpt-x", messages=MESSAGES, tools=TOOLS_OPENAI)  # type: ignore[arg-type]
    assert reply.choices[0].finish_reason == "tool_calls"
    [call] = reply.choices[0].message.tool_calls or []
    assert call.id == "call_abc" and call.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == ARGS  # type: ignore[union-attr]

    stream = oai.chat.completions.create(model="gpt-x", messages=MESSAGES, tools=TOOLS_OPENAI, stream=True)  # type: ignore[arg-type]
    text, fragments, finish = "", [], None
    ids, names = [], []
    for chunk in stream:
        delta = chunk.choices[0].delta
        text += delta.content or ""
        for tc in delta.tool_calls or []:
            if tc.id:
                ids.append(tc.id)
            if tc.function and tc.function.name:
                names.append(tc.function.name)
            if tc.function and tc.function.arguments:
                fragments.append(tc.function.arguments)
        finish = chunk.choices[0].finish_reason or finish
    assert text == "Let me check. "
    assert ids == ["call_1"] and names == ["get_weather"]
    assert len(fragments) > 3
    assert json.loads("".join(fragments)) == ARGS
    assert finish == "tool_calls"


@pytest.mark.parametrize(
    ("status", "exc"),
    [(400, openai.BadRequestError), (429, openai.RateLimitError), (500, openai.InternalServerError)],
)
def test_openai_errors(upstream: ScriptedUpstream, oai: openai.OpenAI, status: int, exc: type) -> None:
    upstream.script(Error(status, "nope", type="scripted_type"))
    with pytest.raises(exc) as info:
        oai.chat.completions.create(model="gpt-x", messages=MESSAGES)  # type: ignore[arg-type]
    assert info.value.status_code == status
    assert info.value.body == {"message": "nope", "type": "scripted_type", "param": None, "code": None}


def test_openai_without_v1_prefix(upstream: ScriptedUpstream) -> None:
    with openai.OpenAI(base_url=upstream.url, api_key="x", max_retries=0) as client:
        reply = client.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
        assert reply.choices[0].message.content == upstream.default_text
        assert [m.id for m in client.models.list()] == ["scripted-model"]
    assert [r.path for r in upstream.requests] == ["/chat/completions", "/models"]


# --------------------------------------------------------------------------------------- Anthropic


def test_anthropic_non_stream(upstream: ScriptedUpstream, ant: anthropic.Anthropic) -> None:
    upstream.script(Text("Hello there", stop="length", usage=(11, 2)))
    message = ant_create(ant)
    assert message.id == "msg_1" and message.model == "claude-x"
    assert message.content[0].type == "text" and message.content[0].text == "Hello there"
    assert message.stop_reason == "max_tokens"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (11, 2)
    [seen] = upstream.requests
    assert seen.path == "/v1/messages"
    assert "anthropic-version" in seen.headers
    assert seen.headers.get("x-api-key") == "x" or seen.headers.get("authorization") == "Bearer x"


def test_anthropic_beta_query_is_captured(upstream: ScriptedUpstream, ant: anthropic.Anthropic) -> None:
    # (Recent SDKs mark beta calls differently; the query string is what older ones and proxies send.)
    message = ant_create(ant, extra_query={"beta": "true"})
    assert message.content[0].text == upstream.default_text  # type: ignore[union-attr]
    [seen] = upstream.requests
    assert (seen.path, seen.query) == ("/v1/messages", "beta=true")


def test_anthropic_stream(upstream: ScriptedUpstream, ant: anthropic.Anthropic) -> None:
    upstream.script(Text("streamed words arrive one by one", usage=(4, 6)))
    with ant.messages.stream(model="claude-x", max_tokens=64, messages=MESSAGES) as stream:  # type: ignore[arg-type]
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert "".join(pieces) == "streamed words arrive one by one" and len(pieces) == 6
    assert final.content[0].text == "streamed words arrive one by one"  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == 6
    assert final.id == "msg_1" and final.model == "claude-x"
    assert upstream.requests[0].body is not None and upstream.requests[0].body["stream"] is True


def test_anthropic_tool_use(upstream: ScriptedUpstream, ant: anthropic.Anthropic) -> None:
    upstream.script(
        ToolCall("get_weather", ARGS, call_id="toolu_01"),
        ToolCall("get_weather", ARGS, text="Checking. ", call_id="toolu_02"),
    )
    message = ant_create(ant, tools=TOOLS_ANTHROPIC)
    assert message.stop_reason == "tool_use"
    [block] = message.content
    assert block.type == "tool_use" and block.id == "toolu_01" and block.input == ARGS

    with ant.messages.stream(
        model="claude-x",
        max_tokens=64,
        messages=MESSAGES,  # type: ignore[arg-type]
        tools=TOOLS_ANTHROPIC,  # type: ignore[arg-type]
    ) as stream:
        partials = [e.partial_json for e in stream if e.type == "input_json"]
        final = stream.get_final_message()
    assert len(partials) > 3
    text, tool = final.content
    assert text.type == "text" and text.text == "Checking. "
    assert tool.type == "tool_use" and tool.id == "toolu_02" and tool.name == "get_weather"
    assert tool.input == ARGS
    assert final.stop_reason == "tool_use"


@pytest.mark.parametrize(
    ("status", "exc"), [(400, anthropic.BadRequestError), (429, anthropic.RateLimitError)]
)
def test_anthropic_errors(
    upstream: ScriptedUpstream, ant: anthropic.Anthropic, status: int, exc: type
) -> None:
    upstream.script(Error(status, "bad things", type="rate_limit_error"))
    with pytest.raises(exc) as info:
        ant_create(ant)
    assert info.value.status_code == status
    assert info.value.body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "bad things"},
    }


def test_count_tokens_does_not_consume_the_script(
    upstream: ScriptedUpstream, ant: anthropic.Anthropic
) -> None:
    upstream.script(Text("still queued"))
    counted = ant.messages.count_tokens(model="claude-x", messages=MESSAGES)  # type: ignore[arg-type]
    assert counted.input_tokens == 42
    assert upstream.pending == 1
    assert ant_create(ant).content[0].text == "still queued"  # type: ignore[union-attr]
    assert upstream.requests[0].path == "/v1/messages/count_tokens"


def test_models_in_both_shapes(
    upstream: ScriptedUpstream, oai: openai.OpenAI, ant: anthropic.Anthropic
) -> None:
    [model] = list(oai.models.list())
    assert (model.id, model.object, model.owned_by) == ("scripted-model", "model", "tests")
    [info] = list(ant.models.list())
    assert (info.id, info.type, info.display_name) == ("scripted-model", "model", "Scripted")
    raw = httpx.get(upstream.url + "/v1/models").json()
    assert raw == {
        "object": "list",
        "data": [{"id": "scripted-model", "object": "model", "created": 0, "owned_by": "tests"}],
    }
    raw = httpx.get(upstream.url + "/v1/models", headers={"anthropic-version": "2023-06-01"}).json()
    assert raw["has_more"] is False and raw["first_id"] == raw["last_id"] == "scripted-model"


# ---------------------------------------------------------------------------- failures and timing


def test_reset_breaks_streams_without_hanging(
    upstream: ScriptedUpstream, oai: openai.OpenAI, ant: anthropic.Anthropic
) -> None:
    upstream.script(Reset(after_chunks=3), Reset(after_chunks=4))
    received = []
    with pytest.raises((httpx.HTTPError, openai.APIError)):
        for chunk in oai.chat.completions.create(model="m", messages=MESSAGES, stream=True):  # type: ignore[arg-type]
            received.append(chunk)
    assert len(received) == 3  # the events sent before the cut reach the client
    events = []
    with pytest.raises(Exception) as info:  # the SDK may bundle its own httpx
        with ant.messages.stream(model="m", max_tokens=9, messages=MESSAGES) as stream:  # type: ignore[arg-type]
            for event in stream:
                events.append(event.type)
    assert isinstance(info.value, anthropic.APIError) or "RemoteProtocolError" in type(info.value).__name__
    assert events[:2] == ["message_start", "content_block_start"]


def test_reset_on_non_stream_request_drops_the_connection(upstream: ScriptedUpstream) -> None:
    upstream.script(Reset())
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(upstream.url + "/v1/chat/completions", json={"model": "m"}, timeout=2)


def test_delay_then_timeout(upstream: ScriptedUpstream) -> None:
    upstream.script(Delay(0.6, Text("too late")), Delay(0.05, Text("in time")))
    with openai.OpenAI(base_url=upstream.url + "/v1", api_key="x", timeout=0.1, max_retries=0) as client:
        with pytest.raises(openai.APITimeoutError):
            client.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
        reply = client.with_options(timeout=2).chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
        assert reply.choices[0].message.content == "in time"


def test_hang_then_client_gives_up_and_stop_is_clean(capfd: pytest.CaptureFixture[str]) -> None:
    server = ScriptedUpstream().start()
    server.script(Hang(), Hang())
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/messages", json={"model": "m"}, timeout=0.1)
    server.wait_for_requests(1)
    deadline = time.monotonic() + 2
    while server.disconnects < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.disconnects == 1  # the upstream noticed the client left

    errors: list[BaseException] = []

    def hung_client() -> None:
        try:
            httpx.post(server.url + "/v1/messages", json={"model": "m"}, timeout=5)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=hung_client)
    thread.start()
    server.wait_for_requests(2)
    server.stop()
    thread.join(30)
    assert not thread.is_alive()  # stop() closed the hung connection: the client is not left waiting
    assert len(errors) == 1 and isinstance(errors[0], httpx.RemoteProtocolError)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", int(server.url.rsplit(":", 1)[1]))) != 0
    server.stop()  # idempotent


def test_slow_streams_events_as_they_are_produced(upstream: ScriptedUpstream) -> None:
    upstream.script(Slow("a b c d", interval=0.06))
    arrivals = []
    started = time.monotonic()
    with httpx.stream(
        "POST", upstream.url + "/v1/chat/completions", json={"model": "m", "stream": True}, timeout=3
    ) as response:
        for line in response.iter_lines():
            if line:
                arrivals.append(time.monotonic() - started)
    assert len(arrivals) == 7  # role, 4 words, finish, [DONE]
    # Each event leaves when produced, not buffered until the end.
    assert all(later - earlier >= 0.04 for earlier, later in itertools.pairwise(arrivals))
    assert arrivals[-1] - arrivals[0] >= 0.3


def test_slow_stream_notices_a_departed_client(upstream: ScriptedUpstream) -> None:
    upstream.script(Slow("many words " * 50, interval=0.02))
    with httpx.stream(
        "POST", upstream.url + "/v1/messages", json={"model": "m", "stream": True}, timeout=3
    ) as response:
        lines = response.iter_lines()
        assert next(lines) == "event: message_start"
    deadline = time.monotonic() + 2
    while upstream.disconnects < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert upstream.disconnects == 1


def test_invalid_json_gets_the_route_envelope(upstream: ScriptedUpstream) -> None:
    upstream.script(Text("kept"))
    bad = b"{not json"
    r = httpx.post(upstream.url + "/v1/chat/completions", content=bad)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    r = httpx.post(upstream.url + "/messages?beta=true", content=bad)
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert upstream.pending == 1
    assert upstream.requests[0].body is None and upstream.requests[0].raw == bad


# -------------------------------------------------------------------------------------- SSE bytes


def test_openai_sse_framing(upstream: ScriptedUpstream) -> None:
    upstream.script(Text("hi you"), Text("hi you"))
    r = httpx.post(
        upstream.url + "/v1/chat/completions",
        json={"model": "m", "stream": True, "stream_options": {"include_usage": True}},
    )
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers.get("transfer-encoding") == "chunked"
    raw = r.content
    assert raw.endswith(b"\n\ndata: [DONE]\n\n")
    events = raw.split(b"\n\n")
    assert events[-1] == b""
    events = events[:-1]
    assert all(e.startswith(b"data: ") and b"\n" not in e for e in events)
    payloads = [json.loads(e[6:]) for e in events[:-1]]
    assert [p["choices"][0]["delta"] for p in payloads[:3]] == [
        {"role": "assistant", "content": ""},
        {"content": "hi "},
        {"content": "you"},
    ]
    assert payloads[3]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    assert payloads[4]["choices"] == [] and payloads[4]["usage"]["total_tokens"] == 15
    assert {p["id"] for p in payloads} == {"chatcmpl-1"}

    plain = httpx.post(upstream.url + "/v1/chat/completions", json={"model": "m", "stream": True}).content
    assert plain.count(b"data: ") == 5 and b'"usage"' not in plain  # no usage chunk unless asked


def test_anthropic_sse_framing(upstream: ScriptedUpstream) -> None:
    upstream.script(Text("hi you"))
    r = httpx.post(upstream.url + "/v1/messages", json={"model": "m", "stream": True})
    assert r.headers["content-type"].startswith("text/event-stream")
    events = r.content.split(b"\n\n")
    assert events[-1] == b""
    names = []
    for event in events[:-1]:
        name_line, data_line = event.split(b"\n")
        assert name_line.startswith(b"event: ") and data_line.startswith(b"data: ")
        name = name_line[7:].decode()
        assert json.loads(data_line[6:])["type"] == name
        names.append(name)
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


# ------------------------------------------------------------------------------------------ basics


def test_script_order_default_and_reset(upstream: ScriptedUpstream, oai: openai.OpenAI) -> None:
    upstream.script(Text("first"))
    upstream.script(Text("second"))

    def ask() -> str | None:
        return oai.chat.completions.create(model="m", messages=MESSAGES).choices[0].message.content  # type: ignore[arg-type]

    assert [ask(), ask(), ask()] == ["first", "second", upstream.default_text]
    upstream.script(Text("dropped"))
    upstream.reset()
    assert upstream.requests == [] and upstream.pending == 0
    assert ask() == upstream.default_text
    assert oai.chat.completions.create(model="m", messages=MESSAGES).id == "chatcmpl-2"  # type: ignore[arg-type]


def test_url_and_free_port() -> None:
    port = free_port()
    assert 0 < port < 65536
    with ScriptedUpstream() as server:
        assert server.url.startswith("http://127.0.0.1:") and not server.url.endswith("/")
        assert httpx.get(server.url + "/models").status_code == 200
        assert httpx.get(server.url + "/nowhere").status_code == 404
