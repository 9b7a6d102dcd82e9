"""Model listings in both dialects, and a token estimate for ``count_tokens``.

Owns: translating ``GET /v1/models`` bodies between OpenAI and Anthropic, and the rough
input-token count reef answers ``POST /v1/messages/count_tokens`` with when the upstream
cannot count.  Does not own: which models exist (the upstream says) or real tokenisation.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

from reef_core.errors import InvalidInput

__all__ = [
    "CHARS_PER_TOKEN",
    "MEDIA_TOKENS",
    "anthropic_models_to_openai",
    "estimate_input_tokens",
    "openai_models_to_anthropic",
]

_EPOCH = "1970-01-01T00:00:00Z"
#: English prose and code average about four characters per token across current tokenizers
CHARS_PER_TOKEN = 4
#: an image or document costs tokens by pixels or pages, not by its base64 size; Anthropic
#: documents ~1600 tokens for an image at the size it scales inputs down to
MEDIA_TOKENS = 1600


def openai_models_to_anthropic(body: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI ``list`` of models as an Anthropic model page (one page: has_more False)."""
    models = [
        {
            "type": "model",
            "id": model["id"],
            "display_name": model["id"],
            "created_at": _rfc3339(model.get("created")),
            # the anthropic SDK requires a lifecycle; a model an upstream lists is usable
            "lifecycle": "active",
        }
        for model in _models(body)
    ]
    return {
        "data": models,
        "has_more": False,
        "first_id": models[0]["id"] if models else None,
        "last_id": models[-1]["id"] if models else None,
    }


def anthropic_models_to_openai(body: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic model page as an OpenAI ``list`` of models."""
    models = [
        {"id": model["id"], "object": "model", "created": _unix(model.get("created_at")), "owned_by": "reef"}
        for model in _models(body)
    ]
    return {"object": "list", "data": models}


def estimate_input_tokens(body: dict[str, Any]) -> int:
    """A rough input-token count for an Anthropic Messages request: never below 1.

    About ``CHARS_PER_TOKEN`` characters per token over the text of ``system``, every
    message and the tools' JSON, plus ``MEDIA_TOKENS`` per image or document.  Callers use it
    for context-window bookkeeping, where being within ~20% matters and exactness does not.
    """
    if not isinstance(body, dict):
        raise InvalidInput("expected a JSON object", field="body")
    chars, media = _measure(body.get("system"))
    for message in body.get("messages") or []:
        more_chars, more_media = _measure(message.get("content") if isinstance(message, dict) else message)
        chars += more_chars
        media += more_media
    if body.get("tools"):
        chars += len(json.dumps(body["tools"], ensure_ascii=False))
    return max(1, math.ceil(chars / CHARS_PER_TOKEN) + media * MEDIA_TOKENS)


def _measure(content: Any) -> tuple[int, int]:
    """(characters of text, count of images/documents) in a content value, recursively."""
    if content is None:
        return 0, 0
    if isinstance(content, str):
        return len(content), 0
    if isinstance(content, list):
        chars = media = 0
        for item in content:
            more_chars, more_media = _measure(item)
            chars += more_chars
            media += more_media
        return chars, media
    if not isinstance(content, dict):
        return len(str(content)), 0
    kind = content.get("type")
    if kind in ("image", "document"):
        return 0, 1
    if kind == "text":
        return len(str(content.get("text", ""))), 0
    if kind == "thinking":
        return len(str(content.get("thinking", ""))), 0
    if kind == "tool_use":
        return len(str(content.get("name", ""))) + len(
            json.dumps(content.get("input"), ensure_ascii=False)
        ), 0
    if kind == "tool_result":
        return _measure(content.get("content"))
    # anything else (redacted thinking, server-tool results, …): its JSON is the best guess
    return len(json.dumps(content, ensure_ascii=False)), 0


def _models(body: dict[str, Any]) -> list[dict[str, Any]]:
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        raise InvalidInput("a model list needs a data array", field="data")
    for i, model in enumerate(body["data"]):
        if not isinstance(model, dict) or not isinstance(model.get("id"), str) or not model["id"]:
            raise InvalidInput("every model needs a string id", field=f"data[{i}].id")
    return body["data"]


def _rfc3339(created: Any) -> str:
    if isinstance(created, bool) or not isinstance(created, int | float) or created < 0:
        return _EPOCH
    try:
        return datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return _EPOCH


def _unix(created_at: Any) -> int:
    if not isinstance(created_at, str):
        return 0
    try:
        moment = datetime.fromisoformat(created_at)
    except ValueError:
        return 0
    if moment.tzinfo is None:  # RFC 3339 always has an offset; a bare time is taken as UTC
        moment = moment.replace(tzinfo=UTC)
    return max(0, int(moment.timestamp()))
