"""Non-streaming responses from one dialect to the other: ``chat.completion`` to Messages and back.

Owns: ``anthropic_response_to_openai`` and ``openai_response_to_anthropic``.  Anthropic has
one reply where OpenAI has choices: only the first choice is translated.
Does not own: stop reasons and usage (``outcome``), the conventions shared with requests and
streams (``content``), or streamed responses (``streams``).
"""

from __future__ import annotations

from typing import Any

from reef_core.wire.anthropic import parse_tool_input
from reef_core.wire.content import TEXT_JOIN, fallback_tool_id, tool_use_as_call
from reef_core.wire.outcome import finish_reason_for, stop_reason_for, usage_to_anthropic, usage_to_openai
from reef_core.wire.shapes import expect_array, expect_object

__all__ = ["anthropic_response_to_openai", "openai_response_to_anthropic"]


def anthropic_response_to_openai(body: dict[str, Any], *, created: int = 0) -> dict[str, Any]:
    """A non-streaming Messages response as a ``chat.completion``."""
    body = expect_object(body, "body")
    texts, calls = [], []
    for j, block in enumerate(expect_array(body.get("content") or [], "content")):
        block = expect_object(block, f"content[{j}]")
        if block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            calls.append(tool_use_as_call(block, f"content[{j}]"))
        # thinking and server-tool blocks have no Chat Completions form
    message: dict[str, Any] = {"role": "assistant", "content": TEXT_JOIN.join(t for t in texts if t) or None}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": body.get("id", ""),
        "object": "chat.completion",
        "created": created,
        "model": body.get("model", ""),
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason_for(body.get("stop_reason")),
            }
        ],
        "usage": usage_to_openai(body.get("usage")),
    }


def openai_response_to_anthropic(body: dict[str, Any]) -> dict[str, Any]:
    """A non-streaming ``chat.completion`` as a Messages response (first choice only)."""
    body = expect_object(body, "body")
    choices = expect_array(body.get("choices") or [], "choices")
    choice = expect_object(choices[0], "choices[0]") if choices else {}
    message = expect_object(choice.get("message") or {}, "choices[0].message")
    content: list[dict[str, Any]] = []
    text = _openai_text(message.get("content")) or message.get("refusal") or ""
    if text:
        content.append({"type": "text", "text": text})
    calls = list(message.get("tool_calls") or [])
    if isinstance(message.get("function_call"), dict):  # the pre-tools API, still served by some
        calls.append({"function": message["function_call"]})
    for k, call in enumerate(calls):
        at = f"choices[0].message.tool_calls[{k}]"
        function = expect_object(expect_object(call, at).get("function"), f"{at}.function")
        arguments = function.get("arguments")
        tool_input = arguments if isinstance(arguments, dict) else parse_tool_input(str(arguments or ""))
        call_id = call.get("id") or fallback_tool_id(str(body.get("id", "")), k)
        content.append(
            {"type": "tool_use", "id": call_id, "name": function.get("name", ""), "input": tool_input}
        )
    return {
        "id": body.get("id", ""),
        "type": "message",
        "role": "assistant",
        "model": body.get("model", ""),
        "content": content,
        "stop_reason": stop_reason_for(choice.get("finish_reason")),
        "stop_sequence": None,
        "usage": usage_to_anthropic(body.get("usage")),
    }


def _openai_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text") or p.get("refusal") or "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""
