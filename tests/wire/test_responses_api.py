"""The Responses API as chat completions and back: requests, Response objects and streams.

Streams are checked by the openai SDK's own state machine (``ResponseStreamState``, the code
behind ``client.responses.stream``), which refuses events out of order or with changed ids.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from reef_core.errors import InvalidInput
from reef_core.wire.responses_api import (
    chat_to_response,
    left_out,
    response_to_chat_message,
    responses_request_to_chat,
)
from reef_core.wire.responses_stream import (
    ChatToResponsesStream,
    ResponsesStreamAssembler,
    with_response_receipt,
)
from reef_core.wire.streams import UpstreamStreamError

RESPONSE_ID = "resp_abc"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": True,
}

# -- requests ------------------------------------------------------------------------------


def test_instructions_and_a_string_input_become_system_and_user_messages():
    chat = responses_request_to_chat({"model": "m", "instructions": "be brief", "input": "hi"})
    assert chat == {
        "model": "m",
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
    }


def test_message_items_keep_their_parts_and_developer_becomes_system():
    chat = responses_request_to_chat(
        {
            "model": "m",
            "input": [
                {"role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
                {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "what is this?"},
                        {"type": "input_image", "image_url": "https://x/cat.png", "detail": "low"},
                    ],
                },
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "a cat", "annotations": []}],
                },
            ],
        }
    )
    assert chat["messages"] == [
        {"role": "system", "content": "rules"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "https://x/cat.png", "detail": "low"}},
            ],
        },
        {"role": "assistant", "content": "a cat"},
    ]


def test_function_calls_join_the_assistant_turn_and_outputs_become_tool_messages():
    chat = responses_request_to_chat(
        {
            "model": "m",
            "input": [
                {"role": "user", "content": "weather in Oslo and Bergen?"},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "Looking."}],
                },
                {
                    "type": "function_call",
                    "call_id": "c1",
                    "name": "get_weather",
                    "arguments": '{"city":"Oslo"}',
                },
                {
                    "type": "function_call",
                    "call_id": "c2",
                    "name": "get_weather",
                    "arguments": '{"city":"Bergen"}',
                },
                {"type": "function_call_output", "call_id": "c1", "output": "4"},
                {
                    "type": "function_call_output",
                    "call_id": "c2",
                    "output": [{"type": "input_text", "text": "6"}],
                },
            ],
        }
    )
    assert chat["messages"] == [
        {"role": "user", "content": "weather in Oslo and Bergen?"},
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Bergen"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "4"},
        {"role": "tool", "tool_call_id": "c2", "content": "6"},
    ]


def test_a_function_call_with_no_assistant_turn_before_it_opens_one():
    chat = responses_request_to_chat(
        {
            "input": [
                {"role": "user", "content": "go"},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            ]
        }
    )
    assert chat["messages"][1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }


def test_tools_tool_choice_and_settings_take_their_chat_names():
    chat = responses_request_to_chat(
        {
            "model": "m",
            "input": "hi",
            "tools": [WEATHER],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "parallel_tool_calls": False,
            "temperature": 0.2,
            "top_p": 0.9,
            "max_output_tokens": 100,
            "reasoning": {"effort": "low"},
            "top_logprobs": 3,
            "stream": True,
            "store": True,
            "metadata": {"k": "v"},
        }
    )
    assert chat == {
        "model": "m",
        "temperature": 0.2,
        "top_p": 0.9,
        "parallel_tool_calls": False,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Weather for a city",
                    "parameters": WEATHER["parameters"],
                    "strict": True,
                },
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "max_tokens": 100,
        "reasoning_effort": "low",
        "logprobs": True,
        "top_logprobs": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    for choice in ("auto", "none", "required"):
        assert responses_request_to_chat({"input": "x", "tool_choice": choice})["tool_choice"] == choice


def test_text_format_becomes_response_format():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    form = {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}
    chat = responses_request_to_chat({"input": "x", "text": {"format": form}})
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema, "strict": True},
    }
    chat = responses_request_to_chat({"input": "x", "text": {"format": {"type": "json_object"}}})
    assert chat["response_format"] == {"type": "json_object"}
    assert "response_format" not in responses_request_to_chat(
        {"input": "x", "text": {"format": {"type": "text"}}}
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
        ({"input": "x", "conversation": "conv_1"}, "conversation"),
        ({"input": "x", "prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"input": "x", "background": True}, "background"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "input[0].content[0].image_url",
        ),
        ({"input": [{"role": "critic", "content": "x"}]}, "input[0].role"),
        ({"input": [{"type": "function_call", "name": "f"}]}, "input[0].call_id"),
        ({"input": "x", "tool_choice": {"type": "web_search"}}, "tool_choice"),
        ({"input": "x", "tools": [{"type": "web_search"}], "tool_choice": "required"}, "tool_choice"),
        ({"input": "x", "text": {"format": {"type": "grammar"}}}, "text.format.type"),
        ({"input": 3}, "input"),
        ({"model": "m"}, "input"),
    ],
)
def test_what_needs_openais_own_server_is_refused_naming_the_field(body, field):
    with pytest.raises(InvalidInput) as caught:
        responses_request_to_chat(body)
    assert caught.value.field == field


# Codex 0.171.0's first request, as tests/fixtures/harness_requests/ holds it, in small: a
# namespace of function tools, a hosted tool, and the settings only OpenAI's servers use
SPAWN = {
    "type": "function",
    "name": "spawn_agent",
    "description": "Start a sub-agent.",
    "parameters": {"type": "object", "properties": {"message": {"type": "string"}}},
}
CODEX_LIKE = {
    "model": "default",
    "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
    "tools": [
        WEATHER,
        {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.", "tools": [SPAWN]},
        {"type": "web_search", "external_web_access": False},
        {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
    ],
    "tool_choice": "auto",
    "store": False,
    "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "thread-1",
    "client_metadata": {"session_id": "thread-1"},
    "reasoning": {"summary": "auto"},
    "stream": True,
}


def test_codex_s_tools_are_offered_as_functions_and_what_only_openai_runs_is_left_out_and_said():
    chat = responses_request_to_chat(CODEX_LIKE)
    assert [t["function"]["name"] for t in chat["tools"]] == ["get_weather", "multi_agent_v1__spawn_agent"]
    assert all(t["type"] == "function" for t in chat["tools"])
    spawn = chat["tools"][1]["function"]
    assert (
        spawn["parameters"] == SPAWN["parameters"]
        and spawn["description"] == "(Sub-agents.) Start a sub-agent."
    )
    assert not {"store", "include", "prompt_cache_key", "client_metadata"} & set(chat)
    assert left_out(CODEX_LIKE) == [
        {
            "field": "tools[2]",
            "kind": "web_search",
            "why": "runs only on OpenAI's servers, which this upstream is not",
        },
        {
            "field": "tools[3]",
            "kind": "custom",
            "why": "a freeform tool (its input is not JSON) has no chat-completions form",
        },
        *(
            {"field": key, "kind": "setting", "why": "OpenAI's own; chat completions has no such setting"}
            for key in ("store", "include", "prompt_cache_key", "client_metadata")
        ),
    ]
    assert left_out({"input": "hi", "tools": [WEATHER], "stream": True}) == []


def test_a_call_to_a_namespaced_tool_goes_back_under_its_name_and_namespace():
    call = {
        "id": "call_9",
        "type": "function",
        "function": {"name": "multi_agent_v1__spawn_agent", "arguments": "{}"},
    }
    plain = {"id": "call_8", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    response = chat_to_response(
        _chat({"role": "assistant", "content": None, "tool_calls": [call, plain]}, "tool_calls"),
        CODEX_LIKE,
        response_id=RESPONSE_ID,
        created_at=1,
        completed_at=2,
    )
    calls = [(i["name"], i.get("namespace"), i["call_id"]) for i in response["output"]]
    assert calls == [("spawn_agent", "multi_agent_v1", "call_9"), ("get_weather", None, "call_8")]
    events = _translate(
        [
            _chunk({"role": "assistant"}),
            _chunk({"tool_calls": [{"index": 0, **call}]}),
            _chunk({}, "tool_calls"),
        ],
        CODEX_LIKE,
    )
    added = [d["item"] for n, d in events if n == "response.output_item.added"]
    done = [d["item"] for n, d in events if n == "response.output_item.done"]
    assert [(i["name"], i["namespace"]) for i in added + done] == [("spawn_agent", "multi_agent_v1")] * 2
    assert events[-1][1]["response"]["output"] == done
    # and the call, given back by the harness with its result, goes upstream under the chat name
    follow = {
        **CODEX_LIKE,
        "input": [
            *CODEX_LIKE["input"],
            {**done[0], "type": "function_call"},
            {"type": "function_call_output", "call_id": "call_9", "output": "agent a1"},
        ],
    }
    messages = responses_request_to_chat(follow)["messages"]
    assert messages[1]["tool_calls"][0]["function"]["name"] == "multi_agent_v1__spawn_agent"
    assert messages[2] == {"role": "tool", "tool_call_id": "call_9", "content": "agent a1"}


def test_the_upstream_s_reasoning_goes_back_with_the_turn_it_led_to_and_openai_s_encrypted_does_not():
    answered = chat_to_response(
        _chat({"role": "assistant", "content": "It is sunny.", "reasoning_content": "Check the sky."}),
        CODEX_LIKE,
        response_id=RESPONSE_ID,
        created_at=1,
        completed_at=2,
    )
    reasoning, message = answered["output"]
    then = {"type": "message", "role": "user", "content": "and tomorrow?"}
    call = {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"}
    sealed = {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA"}
    body = {"input": [CODEX_LIKE["input"][0], reasoning, message, then, sealed, call]}
    messages = responses_request_to_chat(body)["messages"]
    assert messages[1] == {
        "role": "assistant",
        "content": "It is sunny.",
        "reasoning_content": "Check the sky.",
    }
    assert messages[3] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
        ],
    }
    assert len(messages) == 4
    assert left_out(body) == [
        {"field": "input[4]", "kind": "reasoning", "why": "encrypted by OpenAI, for OpenAI alone"}
    ]
    # a reasoning that led to a tool call goes back on that call's turn
    thought = {
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "Look it up."}],
    }
    messages = responses_request_to_chat({"input": [CODEX_LIKE["input"][0], thought, call]})["messages"]
    assert messages[1]["reasoning_content"] == "Look it up." and messages[1]["tool_calls"][0]["id"] == "c1"


def test_a_hosted_tool_s_past_call_is_left_out_and_an_item_reference_is_still_refused():
    searched = {"type": "web_search_call", "id": "ws_1", "status": "completed"}
    body = {"input": [searched, {"type": "message", "role": "user", "content": "hi"}]}
    assert responses_request_to_chat(body)["messages"] == [{"role": "user", "content": "hi"}]
    assert left_out(body) == [
        {
            "field": "input[0]",
            "kind": "web_search_call",
            "why": "runs only on OpenAI's servers, which this upstream is not",
        }
    ]


def test_a_stored_request_is_read_leniently():
    body = {
        "previous_response_id": "resp_1",
        "tools": [{"type": "web_search"}, WEATHER],
        "input": [
            {"type": "item_reference", "id": "msg_1"},
            {
                "role": "user",
                "content": [{"type": "input_text", "text": "hi"}, {"type": "input_image", "file_id": "f"}],
            },
        ],
    }
    chat = responses_request_to_chat(body, strict=False)
    assert chat["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert [t["function"]["name"] for t in chat["tools"]] == ["get_weather"]


# -- answers -------------------------------------------------------------------------------


def _chat(
    message: dict[str, Any], finish: str = "stop", usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "up-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage or {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def test_a_chat_answer_becomes_a_response_echoing_the_request():
    request = {
        "model": "m",
        "instructions": "be brief",
        "input": "hi",
        "tools": [WEATHER],
        "temperature": 0.5,
    }
    message = {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
        ],
    }
    response = chat_to_response(
        _chat(message, "tool_calls"), request, response_id=RESPONSE_ID, created_at=5, completed_at=7
    )
    assert response["id"] == RESPONSE_ID and response["object"] == "response"
    assert response["status"] == "completed" and response["completed_at"] == 7
    assert response["created_at"] == 1700000000 and response["model"] == "up-model"
    assert response["instructions"] == "be brief" and response["tools"] == [WEATHER]
    assert response["temperature"] == 0.5 and response["tool_choice"] == "auto"
    assert response["output"] == [
        {
            "type": "message",
            "id": "msg_abc_0",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Checking.", "annotations": [], "logprobs": []}],
        },
        {
            "type": "function_call",
            "id": "fc_abc_1",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": "{}",
            "status": "completed",
        },
    ]
    assert response["usage"] == {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }
    assert response_to_chat_message(response) == {
        "role": "assistant",
        **{k: message[k] for k in ("content", "tool_calls")},
    }


@pytest.mark.parametrize(
    ("finish", "reason"), [("length", "max_output_tokens"), ("content_filter", "content_filter")]
)
def test_a_cut_answer_is_incomplete(finish, reason):
    response = chat_to_response(
        _chat({"role": "assistant", "content": "partial"}, finish),
        {},
        response_id=RESPONSE_ID,
        created_at=1,
        completed_at=2,
    )
    assert response["status"] == "incomplete" and response["incomplete_details"] == {"reason": reason}
    assert response["completed_at"] is None


def test_reasoning_content_becomes_a_reasoning_item_first():
    message = {"role": "assistant", "content": "4", "reasoning_content": "2 and 2"}
    usage = {
        "prompt_tokens": 3,
        "completion_tokens": 9,
        "total_tokens": 12,
        "prompt_tokens_details": {"cached_tokens": 2},
        "completion_tokens_details": {"reasoning_tokens": 7},
    }
    response = chat_to_response(
        _chat(message, usage=usage), {}, response_id=RESPONSE_ID, created_at=1, completed_at=2
    )
    assert [item["type"] for item in response["output"]] == ["reasoning", "message"]
    assert response["output"][0]["content"] == [{"type": "reasoning_text", "text": "2 and 2"}]
    assert response["usage"]["input_tokens_details"]["cached_tokens"] == 2
    assert response["usage"]["output_tokens_details"]["reasoning_tokens"] == 7


# -- streams -------------------------------------------------------------------------------


def _chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "up",
        "choices": choices,
        **extra,
    }


CHAT_STREAM = [
    _chunk({"role": "assistant", "content": ""}),
    _chunk({"reasoning_content": "think"}),
    _chunk({"content": "Let me "}),
    _chunk({"content": "look."}),
    _chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "f", "arguments": '{"a"'},
                }
            ]
        }
    ),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}),
    _chunk(
        {
            "tool_calls": [
                {"index": 1, "id": "call_2", "type": "function", "function": {"name": "g", "arguments": "{}"}}
            ]
        }
    ),
    _chunk({}, "tool_calls"),
    _chunk(usage={"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10}),
]


def _translate(
    chunks: list[dict[str, Any]], request: dict[str, Any] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    stream = ChatToResponsesStream(
        request or {"model": "m", "input": "hi"}, response_id=RESPONSE_ID, created_at=1
    )
    events = [event for chunk in chunks for event in stream.feed(chunk)]
    return events + stream.finish(2)


def test_a_chat_stream_becomes_responses_events_in_openais_order():
    events = _translate(CHAT_STREAM)
    assert [name for name, _ in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert all(data["type"] == name for name, data in events)
    final = events[-1][1]["response"]
    assert [item["type"] for item in final["output"]] == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
    ]
    assert final["output"][1]["content"][0]["text"] == "Let me look."
    assert [(i["call_id"], i["arguments"]) for i in final["output"][2:]] == [
        ("call_1", '{"a":1}'),
        ("call_2", "{}"),
    ]
    assert final["usage"]["total_tokens"] == 10 and final["model"] == "up"


def test_the_sdk_stream_state_accepts_the_events_and_builds_the_same_response():
    streaming = pytest.importorskip("openai.lib.streaming.responses._responses")
    from openai import omit
    from openai.types.responses import ResponseStreamEvent
    from pydantic import TypeAdapter

    state = streaming.ResponseStreamState(input_tools=omit, text_format=omit)
    adapter = TypeAdapter(ResponseStreamEvent)
    events = _translate(CHAT_STREAM)
    for _, data in events:
        state.handle_event(adapter.validate_python(data))
    final = state._completed_response
    assert final is not None and final.id == RESPONSE_ID
    assert final.output_text == "Let me look."
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call", "function_call"]


def test_the_assembler_rebuilds_the_terminal_response_and_a_cut_one():
    events = _translate(CHAT_STREAM)
    whole = ResponsesStreamAssembler()
    for _, data in events:
        whole.feed(copy.deepcopy(data))
    assert whole.result() == events[-1][1]["response"] and whole.terminal == "response.completed"
    cut = ResponsesStreamAssembler()
    for _, data in events[:13]:  # up to the message's text, before its item is done
        cut.feed(copy.deepcopy(data))
    partial = cut.result()
    assert partial["status"] == "in_progress"
    assert partial["output"][1]["content"][0]["text"] == "Let me look."
    name, failed = cut.failure("upstream went away")
    assert name == "response.failed" and failed["sequence_number"] == 13
    assert failed["response"]["status"] == "failed"
    assert failed["response"]["error"] == {"code": "server_error", "message": "upstream went away"}
    name, error = ResponsesStreamAssembler().failure("nothing came")
    assert name == "error" and error["message"] == "nothing came" and error["sequence_number"] == 0


def test_length_ends_as_response_incomplete():
    events = _translate([_chunk({"content": "par"}), _chunk({}, "length")])
    name, data = events[-1]
    assert name == "response.incomplete"
    assert data["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_an_empty_stream_still_starts_and_completes():
    assert [name for name, _ in _translate([])] == [
        "response.created",
        "response.in_progress",
        "response.completed",
    ]


def test_an_error_chunk_is_an_upstream_error():
    stream = ChatToResponsesStream({}, response_id=RESPONSE_ID, created_at=1)
    with pytest.raises(UpstreamStreamError, match="overloaded"):
        stream.feed({"error": {"message": "overloaded"}})


def test_the_receipt_rides_on_the_event_and_its_response():
    data = {"type": "response.completed", "sequence_number": 3, "response": {"id": RESPONSE_ID}}
    assert with_response_receipt(data, "rec_1") == {
        "type": "response.completed",
        "sequence_number": 3,
        "response": {"id": RESPONSE_ID, "reef": {"agent_record_id": "rec_1"}},
        "reef": {"agent_record_id": "rec_1"},
    }
    assert "reef" not in data["response"]
