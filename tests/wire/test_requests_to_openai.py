"""Request translation, Messages to Chat Completions (and back, for the round trip)."""

from __future__ import annotations

from typing import Any

import pytest

from reef_core.errors import InvalidInput
from reef_core.wire.requests_to_anthropic import openai_request_to_anthropic
from reef_core.wire.requests_to_openai import anthropic_request_to_openai

PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def _refused(translate: Any, body: dict[str, Any]) -> str | None:
    with pytest.raises(InvalidInput) as info:
        translate(body)
    return info.value.field


# ---------------------------------------------------------------- Anthropic -> OpenAI

CLAUDE_CODE_REQUEST: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 32000,
    "stream": True,
    "system": [
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Be careful."},
    ],
    "messages": [
        {
            "role": "user",
            "content": [{"type": "text", "text": "List files", "cache_control": {"type": "ephemeral"}}],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Use ls.", "signature": "sig"},
                {"type": "text", "text": "Listing."},
                {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {"command": "ls -a"}},
            ],
        },
        {"role": "system", "content": "<reminder>todo list is empty</reminder>"},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": "a.txt\nb.txt"},
                {"type": "text", "text": "Now read a.txt"},
            ],
        },
    ],
    "tools": [
        {
            "name": "Bash",
            "description": "Run a command",
            "input_schema": {"type": "object", "properties": {}},
        },
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
    ],
    "tool_choice": {"type": "auto"},
    "metadata": {"user_id": "user_abc"},
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "context_management": {"edits": []},
    "output_config": {"effort": "high"},
    "betas": ["x"],
    "top_k": 5,
    "temperature": 1,
}


def test_claude_code_request_becomes_a_chat_completions_request():
    out = anthropic_request_to_openai(CLAUDE_CODE_REQUEST)
    assert out == {
        "model": "claude-sonnet-4-5",
        "messages": [
            {"role": "system", "content": "You are Claude Code.\n\nBe careful."},
            {"role": "user", "content": "List files"},
            {
                "role": "assistant",
                "content": "Listing.",
                "tool_calls": [
                    {
                        "id": "toolu_01",
                        "type": "function",
                        "function": {"name": "Bash", "arguments": '{"command":"ls -a"}'},
                    }
                ],
            },
            {"role": "system", "content": "<reminder>todo list is empty</reminder>"},
            {"role": "tool", "tool_call_id": "toolu_01", "content": "a.txt\nb.txt"},
            {"role": "user", "content": "Now read a.txt"},
        ],
        "max_tokens": 32000,
        "temperature": 1,
        "stream": True,
        "stream_options": {"include_usage": True},
        "user": "user_abc",
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "Bash",
                    "description": "Run a command",
                    "parameters": {"type": "object", "properties": {}},
                },
            }
        ],
        "tool_choice": "auto",
    }


def test_anthropic_system_string_and_in_message_system_blocks():
    out = anthropic_request_to_openai(
        {
            "system": "Top.",
            "messages": [
                {"role": "system", "content": [{"type": "text", "text": "Inline."}]},
                {"role": "user", "content": "hi"},
            ],
        }
    )
    assert out["messages"] == [
        {"role": "system", "content": "Top."},
        {"role": "system", "content": "Inline."},
        {"role": "user", "content": "hi"},
    ]


def test_anthropic_tool_results_come_before_the_rest_of_the_user_message():
    out = anthropic_request_to_openai(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Here you go"},
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                        },
                        {"type": "tool_result", "tool_use_id": "t2", "content": "boom", "is_error": True},
                        {"type": "tool_result", "tool_use_id": "t3"},
                    ],
                }
            ]
        }
    )
    assert out["messages"] == [
        {"role": "tool", "tool_call_id": "t1", "content": "a\nb"},
        {"role": "tool", "tool_call_id": "t2", "content": "Error: boom"},
        {"role": "tool", "tool_call_id": "t3", "content": ""},
        {"role": "user", "content": "Here you go"},
    ]


def test_anthropic_images_become_image_url_parts_and_tool_result_images_follow_the_tools():
    base64_image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}}
    url_image = {"type": "image", "source": {"type": "url", "url": "https://example.com/x.png"}}
    out = anthropic_request_to_openai(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": [{"type": "text", "text": "shot:"}, url_image],
                        },
                        {"type": "text", "text": "compare with"},
                        base64_image,
                    ],
                }
            ]
        }
    )
    assert out["messages"] == [
        {"role": "tool", "tool_call_id": "t1", "content": "shot:\n[image: see the next user message]"},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}},
                {"type": "text", "text": "compare with"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
            ],
        },
    ]


def test_anthropic_multiple_user_text_blocks_stay_separate_parts():
    out = anthropic_request_to_openai(
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
            ]
        }
    )
    assert out["messages"][0]["content"] == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]


def test_anthropic_assistant_with_only_thinking_is_dropped_and_server_tool_blocks_too():
    out = anthropic_request_to_openai(
        {
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "xx"}]},
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "server_tool_use",
                            "id": "srvtoolu_1",
                            "name": "web_search",
                            "input": {"query": "x"},
                        },
                        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                        {"type": "text", "text": "Found it."},
                    ],
                },
            ]
        }
    )
    assert out["messages"] == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "Found it."},
    ]


@pytest.mark.parametrize(
    ("choice", "expected", "parallel"),
    [
        ({"type": "auto"}, "auto", None),
        ({"type": "any"}, "required", None),
        ({"type": "none"}, "none", None),
        ({"type": "tool", "name": "Bash"}, {"type": "function", "function": {"name": "Bash"}}, None),
        ({"type": "any", "disable_parallel_tool_use": True}, "required", False),
    ],
)
def test_anthropic_tool_choice(choice: dict[str, Any], expected: Any, parallel: Any):
    out = anthropic_request_to_openai(
        {
            "messages": [{"role": "user", "content": "x"}],
            "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
            "tool_choice": choice,
        }
    )
    assert out["tool_choice"] == expected
    assert out.get("parallel_tool_calls") == parallel


def test_anthropic_only_server_tools_means_no_tools_and_no_tool_choice():
    out = anthropic_request_to_openai(
        {
            "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "web_search_20250305", "name": "web_search"}],
            "tool_choice": {"type": "any"},
            "stop_sequences": ["###"],
            "top_p": 0.5,
            "stream": False,
        }
    )
    assert "tools" not in out and "tool_choice" not in out
    assert out["stop"] == ["###"] and out["top_p"] == 0.5
    assert out["stream"] is False and "stream_options" not in out


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"messages": {}}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        ({"system": [{"type": "image"}], "messages": []}, "system[0]"),
        (
            {"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]},
            "messages[0].content[0].tool_use_id",
        ),
        ({"messages": [{"role": "user", "content": [{"type": "audio"}]}]}, "messages[0].content[0].type"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}],
                    }
                ]
            },
            "messages[0].content[0].type",
        ),
        (
            {"messages": [{"role": "assistant", "content": [{"type": "tool_use", "name": "x"}]}]},
            "messages[0].content[0].id",
        ),
        (
            {"messages": [{"role": "assistant", "content": [{"type": "image"}]}]},
            "messages[0].content[0].type",
        ),
        ({"messages": [], "tools": [{"input_schema": {}}]}, "tools[0].name"),
        (
            {"messages": [], "tools": [{"name": "a", "input_schema": {}}], "tool_choice": {"type": "maybe"}},
            "tool_choice.type",
        ),
    ],
)
def test_anthropic_bad_input_names_the_field(body: dict[str, Any], field: str):
    assert _refused(anthropic_request_to_openai, body) == field


# ---------------------------------------------------------------- round trips


def test_claude_code_request_survives_a_round_trip_through_openai():
    back = openai_request_to_anthropic(anthropic_request_to_openai(CLAUDE_CODE_REQUEST))
    assert back["system"] == [
        {"type": "text", "text": "You are Claude Code.\n\nBe careful."},
        {"type": "text", "text": "<reminder>todo list is empty</reminder>"},
    ]
    assert [m["role"] for m in back["messages"]] == ["user", "assistant", "user"]
    assert back["messages"][1]["content"][1] == {
        "type": "tool_use",
        "id": "toolu_01",
        "name": "Bash",
        "input": {"command": "ls -a"},
    }
    assert back["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "a.txt\nb.txt"},
        {"type": "text", "text": "Now read a.txt"},
    ]
    assert back["tools"] == [
        {"name": "Bash", "description": "Run a command", "input_schema": {"type": "object", "properties": {}}}
    ]
    assert back["metadata"] == {"user_id": "user_abc"}
    assert back["max_tokens"] == 32000 and back["stream"] is True
