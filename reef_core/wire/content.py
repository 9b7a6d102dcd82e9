"""Content both translation directions write the same way, so they stay consistent.

Owns: the separator that joins an assistant's several text blocks into one string (in
requests, responses and streams alike: OpenAI-compatible servers handle a plain string best;
a user's several text blocks stay separate content parts), an Anthropic ``tool_use`` block as
an OpenAI tool call, the id given to a tool call that came without one, and the compact JSON
that tool arguments are written in.
Does not own: whole requests, responses or streams (``requests_to_anthropic``,
``requests_to_openai``, ``responses``, ``streams``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from reef_core.wire.shapes import expect_name

__all__ = ["TEXT_JOIN", "compact_json", "fallback_tool_id", "tool_use_as_call"]

TEXT_JOIN = "\n\n"


def tool_use_as_call(block: dict[str, Any], where: str) -> dict[str, Any]:
    """An Anthropic ``tool_use`` block as an OpenAI tool call; ``where`` names it in errors."""
    call_id = expect_name(block.get("id"), f"{where}.id", "a tool_use block needs an id")
    name = expect_name(block.get("name"), f"{where}.name", "a tool_use block needs a name")
    arguments = compact_json(block.get("input") if block.get("input") is not None else {})
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def compact_json(value: Any) -> str:
    """``value`` as JSON without spaces, as tool arguments are written."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def fallback_tool_id(message_id: str, k: int) -> str:
    """An id for the ``k``-th tool call of a message whose upstream gave it none."""
    # Anthropic accepts only [A-Za-z0-9_-] in a tool_use id, and it comes back in the next turn
    return f"call_{re.sub(r'[^A-Za-z0-9_-]', '', message_id)}_{k}"
