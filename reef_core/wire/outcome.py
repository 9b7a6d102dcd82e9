"""How a reply ended and what it cost, in both dialects: stop reasons and token usage.

Owns: OpenAI's ``finish_reason`` against Anthropic's ``stop_reason``, and usage counts.
OpenAI counts cached prompt tokens inside ``prompt_tokens``; Anthropic counts them apart
(``cache_read_input_tokens``, ``cache_creation_input_tokens``), so usage adds or subtracts.
Does not own: where these sit in a response or a stream (``responses``, ``streams``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["finish_reason_for", "stop_reason_for", "usage_to_anthropic", "usage_to_openai"]

_FINISH_TO_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    # Anthropic's "refusal" makes Claude Code treat the turn as refused; a filtered OpenAI
    # reply is better shown as whatever text it carried
    "content_filter": "end_turn",
}
_STOP_TO_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def finish_reason_for(stop_reason: Any) -> str | None:
    """The OpenAI ``finish_reason`` for an Anthropic ``stop_reason`` (``None`` stays ``None``)."""
    return None if stop_reason is None else _STOP_TO_FINISH.get(stop_reason, "stop")


def stop_reason_for(finish_reason: Any) -> str | None:
    """The Anthropic ``stop_reason`` for an OpenAI ``finish_reason`` (``None`` stays ``None``)."""
    return None if finish_reason is None else _FINISH_TO_STOP.get(finish_reason, "end_turn")


def usage_to_openai(usage: Any) -> dict[str, Any]:
    """Anthropic ``usage`` as OpenAI ``usage``: cached tokens join ``prompt_tokens``."""
    usage = usage if isinstance(usage, dict) else {}
    cached = _count(usage.get("cache_read_input_tokens"))
    prompt = _count(usage.get("input_tokens")) + cached + _count(usage.get("cache_creation_input_tokens"))
    completion = _count(usage.get("output_tokens"))
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out


def usage_to_anthropic(usage: Any) -> dict[str, Any]:
    """OpenAI ``usage`` as Anthropic ``usage``: cached tokens leave ``input_tokens``."""
    usage = usage if isinstance(usage, dict) else {}
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    out = {
        "input_tokens": max(_count(usage.get("prompt_tokens")) - cached, 0),
        "output_tokens": _count(usage.get("completion_tokens")),
    }
    if cached:
        out["cache_read_input_tokens"] = cached
    return out


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
