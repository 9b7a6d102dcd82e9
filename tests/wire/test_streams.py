"""Stream assembly and stream translation, checked against the non-streaming translations."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from reef_core.errors import InvalidInput
from reef_core.wire.anthropic import MessageStreamAssembler, with_receipt
from reef_core.wire.openai import ChatStreamAssembler, receipt_chunk
from reef_core.wire.sse import SSEDecoder, encode_event
from reef_core.wire.translate import (
    AnthropicToOpenAIStream,
    OpenAIToAnthropicStream,
    UpstreamStreamError,
    anthropic_response_to_openai,
    openai_response_to_anthropic,
)


def _delta(index: int, delta: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}


def _start(index: int, block: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}


def _stop(index: int) -> tuple[str, dict[str, Any]]:
    return "content_block_stop", {"type": "content_block_stop", "index": index}


# Claude thinking, then text, then a tool call whose JSON arrives split mid-token, then a tool
# call with no arguments (input whole in the start event, no deltas).
ANTHROPIC_STREAM: list[tuple[str, dict[str, Any]]] = [
    (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": 472,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 100,
                    "output_tokens": 2,
                },
            },
        },
    ),
    _start(0, {"type": "thinking", "thinking": "", "signature": ""}),
    _delta(0, {"type": "thinking_delta", "thinking": "The user wants weather."}),
    _delta(0, {"type": "signature_delta", "signature": "EqQBCkYIARgCIkB"}),
    _stop(0),
    _start(1, {"type": "text", "text": ""}),
    ("ping", {"type": "ping"}),
    _delta(1, {"type": "text_delta", "text": "Okay, let's check "}),
    _delta(1, {"type": "text_delta", "text": "the weather ☀️."}),
    _stop(1),
    _start(
        2, {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "get_weather", "input": {}}
    ),
    _delta(2, {"type": "input_json_delta", "partial_json": ""}),
    _delta(2, {"type": "input_json_delta", "partial_json": '{"location": "San Fra'}),
    _delta(2, {"type": "input_json_delta", "partial_json": 'ncisco, CA", "unit": "fah'}),
    _delta(2, {"type": "input_json_delta", "partial_json": 'renheit"}'}),
    _stop(2),
    _start(3, {"type": "tool_use", "id": "toolu_02", "name": "get_time", "input": {}}),
    _stop(3),
    (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 89},
        },
    ),
    ("message_stop", {"type": "message_stop"}),
]

_HEAD = {
    "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
    "object": "chat.completion.chunk",
    "created": 1741570283,
    "model": "gpt-4o-2024-08-06",
    "system_fingerprint": "fp_eb9dce56a8",
}


def _chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    return {**_HEAD, "choices": [choice], "usage": None}


def _call(index: int, arguments: str, **head: str) -> dict[str, Any]:
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if head:
        call.update(id=head["id"], type="function")
        call["function"]["name"] = head["name"]
    return _chunk({"tool_calls": [call]})


# What OpenAI sends with stream_options.include_usage: a role chunk, content, two tool calls
# whose arguments come in fragments, the finish_reason chunk, then usage with empty choices.
OPENAI_STREAM: list[dict[str, Any]] = [
    _chunk({"role": "assistant", "content": "", "refusal": None}),
    _chunk({"content": "Let me "}),
    _chunk({"content": "look that up."}),
    _call(0, "", id="call_DdmO9pD3xa9XTPNJ32zg2hcA", name="get_weather"),
    _call(0, '{"loc'),
    _call(0, 'ation": "Par'),
    _call(0, 'is"}'),
    _call(1, "", id="call_2", name="get_time"),
    _call(1, '{"tz":'),
    _call(1, ' "CET"}'),
    _chunk({}, "tool_calls"),
    {
        **_HEAD,
        "choices": [],
        "usage": {
            "prompt_tokens": 182,
            "completion_tokens": 40,
            "total_tokens": 222,
            "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
    },
]


def _assemble_anthropic(events: list[tuple[str, dict[str, Any]]]) -> MessageStreamAssembler:
    assembler = MessageStreamAssembler()
    for event, data in events:
        assembler.feed(event, data)
    return assembler


def _assemble_openai(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    assembler = ChatStreamAssembler()
    for chunk in chunks:
        assembler.feed(chunk)
    return assembler.result()


def _parsed_arguments(completion: dict[str, Any]) -> dict[str, Any]:
    # streamed argument text keeps the upstream's spacing; only its meaning must match
    completion = copy.deepcopy(completion)
    for choice in completion["choices"]:
        for call in choice["message"].get("tool_calls", []):
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return completion


def _check_event_order(events: list[tuple[str, dict[str, Any]]]) -> None:
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names.count("message_start") == 1
    assert names[-1] == "message_stop" and names.count("message_stop") == 1
    assert names[-2] == "message_delta" and names.count("message_delta") == 1
    open_index = None
    started = []
    for name, data in events:
        assert data["type"] == name
        if name == "content_block_start":
            assert open_index is None, "a block started while another was open"
            open_index = data["index"]
            started.append(open_index)
        elif name == "content_block_delta":
            assert data["index"] == open_index
        elif name == "content_block_stop":
            assert data["index"] == open_index
            open_index = None
    assert open_index is None
    assert started == list(range(len(started)))


# ---------------------------------------------------------------- assemblers


def test_message_assembler_builds_the_non_streaming_message():
    assembler = _assemble_anthropic(ANTHROPIC_STREAM)
    assert assembler.complete and assembler.error is None
    assert assembler.result() == {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "thinking", "thinking": "The user wants weather.", "signature": "EqQBCkYIARgCIkB"},
            {"type": "text", "text": "Okay, let's check the weather ☀️."},
            {
                "type": "tool_use",
                "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                "name": "get_weather",
                "input": {"location": "San Francisco, CA", "unit": "fahrenheit"},
            },
            {"type": "tool_use", "id": "toolu_02", "name": "get_time", "input": {}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 472,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 100,
            "output_tokens": 89,
        },
    }


def test_message_assembler_keeps_unparseable_tool_json_and_is_incomplete_without_stop():
    events = [*ANTHROPIC_STREAM[:11], _delta(2, {"type": "input_json_delta", "partial_json": '{"cut'})]
    assembler = _assemble_anthropic(events)
    assert not assembler.complete
    assert assembler.result()["content"][2]["input"] == {"_raw": '{"cut'}
    assembler.feed("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    assert assembler.error == {"type": "overloaded_error", "message": "Overloaded"}


def test_message_assembler_ignores_unknown_events_and_refuses_garbage():
    assembler = MessageStreamAssembler()
    assembler.feed("some_future_event", {"type": "some_future_event"})
    assert assembler.result()["content"] == []
    with pytest.raises(InvalidInput) as info:
        assembler.feed("content_block_delta", {"index": "zero", "delta": {}})
    assert info.value.field == "index"
    with pytest.raises(InvalidInput):
        assembler.feed("message_start", {"type": "message_start"})


def test_chat_assembler_builds_the_non_streaming_completion():
    assert _assemble_openai(OPENAI_STREAM) == {
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "object": "chat.completion",
        "created": 1741570283,
        "model": "gpt-4o-2024-08-06",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Let me look that up.",
                    "tool_calls": [
                        {
                            "id": "call_DdmO9pD3xa9XTPNJ32zg2hcA",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'},
                        },
                        {
                            "id": "call_2",
                            "type": "function",
                            "function": {"name": "get_time", "arguments": '{"tz": "CET"}'},
                        },
                    ],
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            }
        ],
        "usage": OPENAI_STREAM[-1]["usage"],
        "system_fingerprint": "fp_eb9dce56a8",
    }


def test_chat_assembler_accepts_the_receipt_and_keeps_choices_apart():
    chunks = [
        {**_HEAD, "choices": [{"index": 1, "delta": {"role": "assistant", "content": "B"}}]},
        {**_HEAD, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "A"}}]},
        {**_HEAD, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        receipt_chunk(OPENAI_STREAM[0], "rec_0193a1b2c3d4e5f60718293a4b5c"),
    ]
    result = _assemble_openai(chunks)
    assert [c["message"]["content"] for c in result["choices"]] == ["A", "B"]
    assert [c["finish_reason"] for c in result["choices"]] == ["stop", None]
    assert "usage" not in result


def test_chat_assembler_refuses_garbage_with_the_field():
    with pytest.raises(InvalidInput) as info:
        ChatStreamAssembler().feed({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": -1}]}}]})
    assert info.value.field == "choices[0].delta.tool_calls[0].index"


def test_receipts():
    chunk = receipt_chunk(OPENAI_STREAM[0], "rec_1")
    assert chunk == {
        "id": _HEAD["id"],
        "object": "chat.completion.chunk",
        "created": _HEAD["created"],
        "model": _HEAD["model"],
        "choices": [],
        "system_fingerprint": _HEAD["system_fingerprint"],
        "reef": {"agent_record_id": "rec_1"},
    }
    after_usage = receipt_chunk(OPENAI_STREAM[-1], "rec_1")
    assert after_usage["usage"] == OPENAI_STREAM[-1]["usage"]
    assert after_usage["system_fingerprint"] == _HEAD["system_fingerprint"]
    assert receipt_chunk(None, "rec_1")["id"] == "chatcmpl-reef"
    assert receipt_chunk(None, "rec_1")["created"] == 0
    stop = {"type": "message_stop"}
    assert with_receipt(stop, "rec_2") == {"type": "message_stop", "reef": {"agent_record_id": "rec_2"}}
    assert stop == {"type": "message_stop"}  # the caller's data is not changed


# ---------------------------------------------------------------- Anthropic stream -> OpenAI chunks


def _to_openai(events: list[tuple[str, dict[str, Any]]], created: int = 1700000000) -> list[dict[str, Any]]:
    stream = AnthropicToOpenAIStream("claude-sonnet-4-5", created=created)
    chunks = [chunk for event, data in events for chunk in stream.feed(event, data)]
    assert stream.done
    return chunks + stream.finish()


def test_anthropic_stream_translates_to_what_the_non_streaming_translation_gives():
    chunks = _to_openai(ANTHROPIC_STREAM)
    streamed = _assemble_openai(chunks)
    expected = anthropic_response_to_openai(
        _assemble_anthropic(ANTHROPIC_STREAM).result(), created=1700000000
    )
    assert _parsed_arguments(streamed) == _parsed_arguments(expected)


def test_anthropic_stream_chunk_shapes():
    chunks = _to_openai(ANTHROPIC_STREAM)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["id"] == "msg_01XFDUDYJgAACzvnptvVoYEL" and c["created"] == 1700000000 for c in chunks)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    starts = [d["tool_calls"][0] for d in deltas if "tool_calls" in d and "id" in d["tool_calls"][0]]
    assert starts == [
        {
            "index": 0,
            "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
            "type": "function",
            "function": {"name": "get_weather", "arguments": ""},
        },
        {"index": 1, "id": "toolu_02", "type": "function", "function": {"name": "get_time", "arguments": ""}},
    ]
    fragments = [d["tool_calls"][0]["function"]["arguments"] for d in deltas if "tool_calls" in d]
    assert fragments[1:4] == ['{"location": "San Fra', 'ncisco, CA", "unit": "fah', 'renheit"}']
    finishing = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finishing) == 1 and finishing[0]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "tool_calls",
    }
    # usage comes once, last, with no choices, as OpenAI sends it
    assert [c for c in chunks if "usage" in c] == [chunks[-1]]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 572,
        "completion_tokens": 89,
        "total_tokens": 661,
        "prompt_tokens_details": {"cached_tokens": 100},
    }


def test_anthropic_stream_separates_text_blocks_like_the_non_streaming_translation():
    head, tail = ANTHROPIC_STREAM[0], ANTHROPIC_STREAM[-2:]
    events = [
        head,
        _start(0, {"type": "text", "text": "One."}),
        _stop(0),
        _start(1, {"type": "text", "text": ""}),
        _delta(1, {"type": "text_delta", "text": ""}),
        _delta(1, {"type": "text_delta", "text": "Two."}),
        _stop(1),
        *tail,
    ]
    streamed = _assemble_openai(_to_openai(events))
    assert streamed["choices"][0]["message"]["content"] == "One.\n\nTwo."
    assert streamed == anthropic_response_to_openai(_assemble_anthropic(events).result(), created=1700000000)


def test_anthropic_stream_error_event_raises():
    stream = AnthropicToOpenAIStream("m")
    stream.feed(*ANTHROPIC_STREAM[0])
    with pytest.raises(UpstreamStreamError) as info:
        stream.feed(
            "error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        )
    assert (info.value.message, info.value.error_type, info.value.code) == (
        "Overloaded",
        "overloaded_error",
        "upstream_error",
    )


def test_anthropic_stream_cut_short_owes_only_what_it_knows():
    stream = AnthropicToOpenAIStream("m")
    for event, data in ANTHROPIC_STREAM[:-1]:  # no message_stop
        stream.feed(event, data)
    assert not stream.done
    owed = stream.finish()
    assert len(owed) == 1 and owed[0]["choices"] == [] and owed[0]["usage"]["completion_tokens"] == 89
    assert stream.done and stream.finish() == []
    assert stream.feed("message_stop", {"type": "message_stop"}) == []


# ---------------------------------------------------------------- OpenAI chunks -> Anthropic stream


def _to_anthropic(chunks: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    stream = OpenAIToAnthropicStream("gpt-4o-2024-08-06")
    events = [event for chunk in chunks for event in stream.feed(chunk)]
    return events + stream.finish()


def test_openai_stream_translates_to_what_the_non_streaming_translation_gives():
    events = _to_anthropic(OPENAI_STREAM)
    _check_event_order(events)
    streamed = _assemble_anthropic(events)
    assert streamed.complete
    expected = openai_response_to_anthropic(_assemble_openai(OPENAI_STREAM))
    expected["id"] = "msg_" + expected["id"]  # streams prefix the id; non-streaming keeps it
    assert streamed.result() == expected
    assert expected["content"][1:] == [
        {
            "type": "tool_use",
            "id": "call_DdmO9pD3xa9XTPNJ32zg2hcA",
            "name": "get_weather",
            "input": {"location": "Paris"},
        },
        {"type": "tool_use", "id": "call_2", "name": "get_time", "input": {"tz": "CET"}},
    ]
    assert expected["usage"] == {"input_tokens": 118, "output_tokens": 40, "cache_read_input_tokens": 64}


def test_openai_stream_event_shapes():
    events = _to_anthropic(OPENAI_STREAM)
    assert events[0] == (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
                "type": "message",
                "role": "assistant",
                "model": "gpt-4o-2024-08-06",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 0, "output_tokens": 0},
            },
        },
    )
    starts = [data["content_block"] for name, data in events if name == "content_block_start"]
    assert starts == [
        {"type": "text", "text": ""},
        {"type": "tool_use", "id": "call_DdmO9pD3xa9XTPNJ32zg2hcA", "name": "get_weather", "input": {}},
        {"type": "tool_use", "id": "call_2", "name": "get_time", "input": {}},
    ]
    partials = [
        d["delta"]["partial_json"] for n, d in events if n == "content_block_delta" and d["index"] == 1
    ]
    assert partials == ['{"loc', 'ation": "Par', 'is"}']
    assert events[-2] == (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"input_tokens": 118, "output_tokens": 40, "cache_read_input_tokens": 64},
        },
    )


def test_openai_stream_holds_the_end_back_until_usage_arrives():
    stream = OpenAIToAnthropicStream("m")
    for chunk in OPENAI_STREAM[:-2]:
        stream.feed(chunk)
    after_finish = stream.feed(OPENAI_STREAM[-2])
    assert [name for name, _ in after_finish] == ["content_block_stop"]
    assert not stream.done
    after_usage = stream.feed(OPENAI_STREAM[-1])
    assert [name for name, _ in after_usage] == ["message_delta", "message_stop"]
    assert stream.done
    assert stream.feed(receipt_chunk(OPENAI_STREAM[0], "rec_1")) == []
    assert stream.finish() == []


def test_openai_stream_without_usage_ends_at_finish():
    events = _to_anthropic(OPENAI_STREAM[:-1])
    _check_event_order(events)
    assert events[-2][1]["usage"] == {"output_tokens": 0}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_openai_stream_usage_in_the_finish_chunk_ends_at_once():
    stream = OpenAIToAnthropicStream("m")
    stream.feed(_chunk({"content": "hi"}))
    last = {**_chunk({}, "stop"), "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}
    events = stream.feed(last)
    assert [name for name, _ in events] == ["content_block_stop", "message_delta", "message_stop"]
    assert events[1][1]["delta"]["stop_reason"] == "end_turn"


def test_openai_stream_without_finish_reason_guesses_from_content():
    text_only = _to_anthropic([_chunk({"content": "hi"})])
    assert text_only[-2][1]["delta"]["stop_reason"] == "end_turn"
    with_tools = _to_anthropic(OPENAI_STREAM[:10])
    _check_event_order(with_tools)
    assert with_tools[-2][1]["delta"]["stop_reason"] == "tool_use"
    nothing = _to_anthropic([])
    assert [name for name, _ in nothing] == ["message_start", "message_delta", "message_stop"]


def test_openai_stream_text_after_a_tool_call_opens_a_new_block():
    chunks = [
        _chunk({"content": "a"}),
        _call(0, "{}", id="c1", name="f"),
        _chunk({"content": "b"}),
        _chunk({}, "stop"),
    ]
    events = _to_anthropic(chunks)
    _check_event_order(events)
    blocks = _assemble_anthropic(events).result()["content"]
    assert [b["type"] for b in blocks] == ["text", "tool_use", "text"]


def test_openai_stream_refuses_arguments_for_a_closed_call_and_reports_errors():
    stream = OpenAIToAnthropicStream("m")
    stream.feed(_call(0, "{", id="c1", name="f"))
    stream.feed(_call(1, "{}", id="c2", name="g"))
    with pytest.raises(InvalidInput):
        stream.feed(_call(0, "}"))
    with pytest.raises(UpstreamStreamError) as info:
        OpenAIToAnthropicStream("m").feed({"error": {"message": "model crashed", "type": "server_error"}})
    assert info.value.message == "model crashed" and info.value.error_type == "server_error"


# ---------------------------------------------------------------- through the SSE framing


def test_translated_events_survive_sse_framing_in_odd_chunks():
    wire = b"".join(encode_event(json.dumps(data), name) for name, data in _to_anthropic(OPENAI_STREAM))
    decoder = SSEDecoder()
    decoded = []
    for i in range(0, len(wire), 7):  # 7 bytes at a time: splits land everywhere
        decoded += decoder.feed(wire[i : i + 7])
    decoded += decoder.flush()
    assembler = MessageStreamAssembler()
    for event in decoded:
        assert event.event is not None
        assembler.feed(event.event, json.loads(event.data))
    assert assembler.complete
    assert assembler.result()["content"][0] == {"type": "text", "text": "Let me look that up."}


def _unindexed(call_id: str | None, arguments: str, name: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"function": {"arguments": arguments}}
    if call_id:
        call.update(id=call_id, type="function")
    if name:
        call["function"]["name"] = name
    return _chunk({"tool_calls": [call]})


# some OpenAI-compatible servers leave out tool_calls[].index
UNINDEXED = [
    _unindexed("c1", '{"a":', "f"),
    _unindexed(None, " 1}"),
    _unindexed("c2", '{"b": 2}', "g"),
    _unindexed("c2", ""),
    _chunk({}, "tool_calls"),
]


def test_tool_calls_without_an_index_are_told_apart_by_id():
    calls = _assemble_openai(UNINDEXED)["choices"][0]["message"]["tool_calls"]
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("c1", "f", '{"a": 1}'),
        ("c2", "g", '{"b": 2}'),
    ]
    blocks = _assemble_anthropic(_to_anthropic(UNINDEXED)).result()["content"]
    assert [(b["id"], b["name"], b["input"]) for b in blocks] == [
        ("c1", "f", {"a": 1}),
        ("c2", "g", {"b": 2}),
    ]
