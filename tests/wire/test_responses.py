"""Non-streaming responses, model lists, error bodies and the token estimate."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reef_core.errors import InvalidInput
from reef_core.wire import anthropic as wire_anthropic
from reef_core.wire import openai as wire_openai
from reef_core.wire.models import (
    MEDIA_TOKENS,
    anthropic_models_to_openai,
    estimate_input_tokens,
    openai_models_to_anthropic,
)
from reef_core.wire.translate import anthropic_response_to_openai, openai_response_to_anthropic

ANTHROPIC_MESSAGE: dict[str, Any] = {
    "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [
        {"type": "thinking", "thinking": "Two parts.", "signature": "EqQB"},
        {"type": "text", "text": "First part."},
        {"type": "text", "text": "Second part."},
        {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"location": "Oslo", "n": 2}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 20,
        "cache_creation_input_tokens": 5,
        "cache_read_input_tokens": 100,
        "output_tokens": 30,
    },
}

OPENAI_COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-abc123",
    "object": "chat.completion",
    "created": 1741570283,
    "model": "gpt-4o-2024-08-06",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Let me check.",
                "refusal": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"location": "Oslo"}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "broken", "arguments": '{"a": '},
                    },
                ],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {
        "prompt_tokens": 125,
        "completion_tokens": 30,
        "total_tokens": 155,
        "prompt_tokens_details": {"cached_tokens": 100, "audio_tokens": 0},
    },
    "system_fingerprint": "fp_1",
}


def test_anthropic_message_becomes_a_valid_chat_completion():
    out = anthropic_response_to_openai(ANTHROPIC_MESSAGE, created=1700000000)
    assert out == {
        "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "claude-sonnet-4-5",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "First part.\n\nSecond part.",
                    "tool_calls": [
                        {
                            "id": "toolu_01A",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"location":"Oslo","n":2}'},
                        }
                    ],
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {
            "prompt_tokens": 125,
            "completion_tokens": 30,
            "total_tokens": 155,
            "prompt_tokens_details": {"cached_tokens": 100},
        },
    }
    assert anthropic_response_to_openai(ANTHROPIC_MESSAGE)["created"] == 0


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        ("pause_turn", "stop"),
        ("model_context_window_exceeded", "length"),
        ("something_new", "stop"),
    ],
)
def test_stop_reason_to_finish_reason(stop_reason: str, finish_reason: str):
    body = {**ANTHROPIC_MESSAGE, "stop_reason": stop_reason, "content": [{"type": "text", "text": "x"}]}
    out = anthropic_response_to_openai(body)
    assert out["choices"][0]["finish_reason"] == finish_reason


def test_anthropic_message_with_only_tool_use_has_null_content():
    body = {**ANTHROPIC_MESSAGE, "content": [ANTHROPIC_MESSAGE["content"][3]]}
    assert anthropic_response_to_openai(body)["choices"][0]["message"]["content"] is None


def test_chat_completion_becomes_a_valid_anthropic_message():
    out = openai_response_to_anthropic(OPENAI_COMPLETION)
    assert out == {
        "id": "chatcmpl-abc123",
        "type": "message",
        "role": "assistant",
        "model": "gpt-4o-2024-08-06",
        "content": [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"location": "Oslo"}},
            {"type": "tool_use", "id": "call_2", "name": "broken", "input": {"_raw": '{"a": '}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 25, "output_tokens": 30, "cache_read_input_tokens": 100},
    }


@pytest.mark.parametrize(
    ("finish_reason", "stop_reason"),
    [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("tool_calls", "tool_use"),
        ("function_call", "tool_use"),
        ("content_filter", "end_turn"),
    ],
)
def test_finish_reason_to_stop_reason(finish_reason: str, stop_reason: str):
    choice = {"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": finish_reason}
    out = openai_response_to_anthropic({**OPENAI_COMPLETION, "choices": [choice]})
    assert out["stop_reason"] == stop_reason


def test_chat_completion_edge_shapes():
    empty = {"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "stop"}
    out = openai_response_to_anthropic({"id": "x", "model": "m", "choices": [empty]})
    assert out["content"] == []  # no empty text block
    assert out["usage"] == {"input_tokens": 0, "output_tokens": 0}
    legacy = {
        "index": 0,
        "message": {
            "role": "assistant",
            "content": None,
            "function_call": {"name": "f", "arguments": '{"a":1}'},
        },
        "finish_reason": "function_call",
    }
    out = openai_response_to_anthropic({"id": "chatcmpl-1", "model": "m", "choices": [legacy]})
    assert out["content"] == [{"type": "tool_use", "id": "call_chatcmpl-1_0", "name": "f", "input": {"a": 1}}]
    refused = {
        "index": 0,
        "message": {"role": "assistant", "content": None, "refusal": "No."},
        "finish_reason": "stop",
    }
    assert openai_response_to_anthropic({"id": "x", "choices": [refused]})["content"] == [
        {"type": "text", "text": "No."}
    ]


def test_responses_round_trip_through_the_other_dialect():
    there_and_back = openai_response_to_anthropic(anthropic_response_to_openai(ANTHROPIC_MESSAGE))
    assert there_and_back["content"] == [
        {"type": "text", "text": "First part.\n\nSecond part."},
        ANTHROPIC_MESSAGE["content"][3],
    ]
    assert there_and_back["stop_reason"] == "tool_use"
    # cache writes fold into plain input tokens: OpenAI has no field for them
    assert there_and_back["usage"] == {
        "input_tokens": 25,
        "output_tokens": 30,
        "cache_read_input_tokens": 100,
    }


def test_responses_refuse_non_objects():
    with pytest.raises(InvalidInput) as info:
        anthropic_response_to_openai({"content": "text"})
    assert info.value.field == "content"
    with pytest.raises(InvalidInput) as info:
        openai_response_to_anthropic({"choices": ["x"]})
    assert info.value.field == "choices[0]"


# ---------------------------------------------------------------- error bodies


def test_error_bodies_have_the_shapes_the_sdks_read():
    assert wire_openai.error_body("bad model", code="model_not_found", param="model") == {
        "error": {
            "message": "bad model",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }
    body = wire_anthropic.error_body("slow down", "rate_limit_error")
    assert body == {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}


# ---------------------------------------------------------------- models

OPENAI_MODELS = {
    "object": "list",
    "data": [
        {"id": "gpt-4o", "object": "model", "created": 1715367049, "owned_by": "system"},
        {"id": "local-model", "object": "model", "owned_by": "vllm"},
    ],
}


def test_openai_models_become_an_anthropic_model_page():
    out = openai_models_to_anthropic(OPENAI_MODELS)
    assert out["data"][0] == {
        "type": "model",
        "id": "gpt-4o",
        "display_name": "gpt-4o",
        "created_at": "2024-05-10T18:50:49Z",
        "lifecycle": "active",
    }
    assert out["data"][1]["created_at"] == "1970-01-01T00:00:00Z"
    assert (out["has_more"], out["first_id"], out["last_id"]) == (False, "gpt-4o", "local-model")
    assert openai_models_to_anthropic({"data": []}) == {
        "data": [],
        "has_more": False,
        "first_id": None,
        "last_id": None,
    }


def test_anthropic_models_become_an_openai_list():
    page = {
        "data": [
            {
                "type": "model",
                "id": "claude-sonnet-4-5",
                "display_name": "Claude",
                "created_at": "2025-09-29T00:00:00Z",
            },
            {"type": "model", "id": "odd", "created_at": "not a date"},
        ],
        "has_more": False,
    }
    out = anthropic_models_to_openai(page)
    assert out == {
        "object": "list",
        "data": [
            {"id": "claude-sonnet-4-5", "object": "model", "created": 1759104000, "owned_by": "reef"},
            {"id": "odd", "object": "model", "created": 0, "owned_by": "reef"},
        ],
    }
    # and back: the time survives
    assert openai_models_to_anthropic(out)["data"][0]["created_at"] == "2025-09-29T00:00:00Z"


def test_model_lists_refuse_entries_without_ids():
    with pytest.raises(InvalidInput) as info:
        openai_models_to_anthropic({"data": [{"object": "model"}]})
    assert info.value.field == "data[0].id"
    with pytest.raises(InvalidInput) as info:
        anthropic_models_to_openai({"models": []})
    assert info.value.field == "data"


# ---------------------------------------------------------------- token estimate


def test_estimate_counts_about_four_characters_per_token():
    assert estimate_input_tokens({"messages": []}) == 1
    assert estimate_input_tokens({"messages": [{"role": "user", "content": "x" * 400}]}) == 100
    tools = [{"name": "t", "input_schema": {"type": "object"}}]
    body = {
        "system": [{"type": "text", "text": "s" * 40}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "u" * 40}]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "a", "name": "t", "input": {"k": "v"}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "r" * 40}]},
        ],
        "tools": tools,
    }
    chars = 40 + 40 + 1 + len('{"k": "v"}') + 40 + len(json.dumps(tools))
    assert estimate_input_tokens(body) == -(-chars // 4)


def test_estimate_counts_images_flat_not_by_base64_size():
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * 100_000}}
    body = {"messages": [{"role": "user", "content": [image, {"type": "text", "text": "abcd"}]}]}
    assert estimate_input_tokens(body) == MEDIA_TOKENS + 1
