"""Request translation, Chat Completions to Messages (and back, for the round trip)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reef_core.errors import InvalidInput
from reef_core.wire.requests_to_anthropic import DEFAULT_MAX_TOKENS, openai_request_to_anthropic
from reef_core.wire.requests_to_openai import anthropic_request_to_openai

PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"location": {"type": "string"}},
    "required": ["location"],
}


def _refused(translate: Any, body: dict[str, Any]) -> str | None:
    with pytest.raises(InvalidInput) as info:
        translate(body)
    return info.value.field


# ---------------------------------------------------------------- OpenAI -> Anthropic


def test_openai_minimal_request_gets_defaults_and_keeps_the_model():
    out = openai_request_to_anthropic({"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]})
    assert out == {
        "model": "gpt-x",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": DEFAULT_MAX_TOKENS,
    }


def test_openai_system_and_developer_messages_become_top_level_system_in_order():
    one = openai_request_to_anthropic(
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]}
    )
    assert one["system"] == "Be brief."
    several = openai_request_to_anthropic(
        {
            "messages": [
                {"role": "system", "content": [{"type": "text", "text": "First."}]},
                {"role": "user", "content": "hi"},
                {"role": "developer", "content": "Second."},
                {"role": "user", "content": "again"},
            ]
        }
    )
    assert several["system"] == [{"type": "text", "text": "First."}, {"type": "text", "text": "Second."}]
    # the system entry between the two user turns no longer separates them
    assert several["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "again"}]}
    ]


def test_openai_consecutive_same_role_messages_merge_and_roles_alternate():
    out = openai_request_to_anthropic(
        {
            "messages": [
                {"role": "user", "content": "one"},
                {"role": "user", "content": [{"type": "text", "text": "two"}]},
                {"role": "assistant", "content": "reply"},
                {"role": "assistant", "content": [{"type": "text", "text": "more"}]},
                {"role": "user", "content": "three"},
            ]
        }
    )
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "user"]
    assert out["messages"][0]["content"] == [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    assert out["messages"][1]["content"] == [
        {"type": "text", "text": "reply"},
        {"type": "text", "text": "more"},
    ]
    assert out["messages"][2] == {"role": "user", "content": "three"}


def test_openai_images_become_base64_or_url_sources():
    out = openai_request_to_anthropic(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is in these?", "cache_control": {"type": "ephemeral"}},
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
                        {
                            "type": "image_url",
                            "image_url": {"url": "https://example.com/cat.jpg", "detail": "low"},
                        },
                    ],
                }
            ]
        }
    )
    assert out["messages"][0]["content"] == [
        {"type": "text", "text": "What is in these?", "cache_control": {"type": "ephemeral"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
    ]


def test_openai_pdf_file_part_becomes_a_document():
    part = {
        "type": "file",
        "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBERi0="},
    }
    out = openai_request_to_anthropic({"messages": [{"role": "user", "content": [part]}]})
    assert out["messages"][0]["content"] == [
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="},
        }
    ]


def test_openai_tool_calls_and_tool_results():
    out = openai_request_to_anthropic(
        {
            "messages": [
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {
                    "role": "assistant",
                    "content": "Checking.",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'},
                        },
                        {"id": "call_2", "type": "function", "function": {"name": "now", "arguments": ""}},
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
                {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "noon"}]},
                {"role": "user", "content": "And tomorrow?"},
            ]
        }
    )
    assert out["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"location": "Paris"}},
            {"type": "tool_use", "id": "call_2", "name": "now", "input": {}},
        ],
    }
    # both results and the user's follow-up share one user turn, results first
    assert out["messages"][2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "18C"},
            {"type": "tool_result", "tool_use_id": "call_2", "content": [{"type": "text", "text": "noon"}]},
            {"type": "text", "text": "And tomorrow?"},
        ],
    }
    assert len(out["messages"]) == 3


def test_openai_assistant_with_only_tool_calls_and_null_content():
    out = openai_request_to_anthropic(
        {
            "messages": [
                {"role": "user", "content": "go"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    ],
                },
            ]
        }
    )
    assert out["messages"][1]["content"] == [{"type": "tool_use", "id": "c", "name": "f", "input": {}}]


@pytest.mark.parametrize(
    ("choice", "parallel", "expected"),
    [
        ("auto", None, {"type": "auto"}),
        ("none", None, {"type": "none"}),
        ("required", None, {"type": "any"}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            None,
            {"type": "tool", "name": "get_weather"},
        ),
        ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        (None, None, None),
    ],
)
def test_openai_tools_and_tool_choice(choice: Any, parallel: Any, expected: Any):
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {
                "type": "function",
                "function": {"name": "get_weather", "description": "Weather", "parameters": WEATHER_SCHEMA},
            },
            {"type": "function", "function": {"name": "now"}},
        ],
    }
    if choice is not None:
        body["tool_choice"] = choice
    if parallel is not None:
        body["parallel_tool_calls"] = parallel
    out = openai_request_to_anthropic(body)
    assert out["tools"] == [
        {"name": "get_weather", "description": "Weather", "input_schema": WEATHER_SCHEMA},
        {"name": "now", "input_schema": {"type": "object", "properties": {}}},
    ]
    assert out.get("tool_choice") == expected


def test_openai_tool_choice_without_tools_is_dropped():
    out = openai_request_to_anthropic({"messages": [{"role": "user", "content": "x"}], "tool_choice": "none"})
    assert "tool_choice" not in out and "tools" not in out


def test_openai_sampling_and_limits():
    out = openai_request_to_anthropic(
        {
            "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 100,
            "max_completion_tokens": 200,
            "temperature": 1.7,
            "top_p": 0.9,
            "stop": "END",
            "stream": True,
            "metadata": {"user": "u-1"},
            "frequency_penalty": 0.5,
            "response_format": {"type": "json_object"},
        }
    )
    assert out["max_tokens"] == 200  # max_completion_tokens is the newer name and wins
    assert out["temperature"] == 1.0
    assert out["top_p"] == 0.9
    assert out["stop_sequences"] == ["END"]
    assert out["stream"] is True
    assert out["metadata"] == {"user_id": "u-1"}
    assert "frequency_penalty" not in out and "response_format" not in out
    listed = openai_request_to_anthropic({"messages": [], "stop": ["a", "b"], "user": "u-2", "max_tokens": 5})
    assert listed["stop_sequences"] == ["a", "b"]
    assert listed["metadata"] == {"user_id": "u-2"}
    assert listed["max_tokens"] == 5


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "messages"),
        ({"messages": "hi"}, "messages"),
        ({"messages": ["hi"]}, "messages[0]"),
        ({"messages": [{"role": "function", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": None}]}, "messages[0].content"),
        (
            {"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]},
            "messages[0].content[0].type",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}]}
                ]
            },
            "messages[0].content[0].image_url.url",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "x"},
                    {
                        "role": "assistant",
                        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{not json"}}],
                    },
                ]
            },
            "messages[1].tool_calls[0].function.arguments",
        ),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "[1]"}}],
                    }
                ]
            },
            "messages[0].tool_calls[0].function.arguments",
        ),
        (
            {"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}]},
            "messages[0].tool_calls[0].id",
        ),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
        ({"messages": [], "tools": [{"type": "function", "function": {}}]}, "tools[0].function.name"),
        ({"messages": [], "tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"messages": [], "max_tokens": 0}, "max_tokens"),
        ({"messages": [], "n": 2}, "n"),
        ({"messages": [], "stop": [1]}, "stop"),
        ({"messages": [], "temperature": "hot"}, "temperature"),
        (
            {
                "messages": [],
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": "sometimes",
            },
            "tool_choice",
        ),
    ],
)
def test_openai_bad_input_names_the_field(body: dict[str, Any], field: str):
    assert _refused(openai_request_to_anthropic, body) == field


# ---------------------------------------------------------------- round trips


def test_openai_tool_exchange_survives_a_round_trip_through_anthropic():
    original = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_abc",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": '{"location": "Paris", "days": [1, 2]}',
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_abc", "content": "sunny"},
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}}],
        "tool_choice": "required",
        "max_tokens": 50,
        "stop": ["x"],
        "user": "u",
    }
    back = anthropic_request_to_openai(openai_request_to_anthropic(original))
    call = back["messages"][2]["tool_calls"][0]
    assert call["id"] == "call_abc"
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"location": "Paris", "days": [1, 2]}
    assert back["messages"][3] == {"role": "tool", "tool_call_id": "call_abc", "content": "sunny"}
    assert back["messages"][:2] == original["messages"][:2]
    assert back["tools"] == original["tools"]
    for key in ("tool_choice", "max_tokens", "stop", "user", "model"):
        assert back[key] == original[key]
