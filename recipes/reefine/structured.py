"""One JSON answer from the served model: a schema when the upstream takes one, parse and check
it, and send an unusable answer back with the reason, a bounded number of times.

Every model call reefine makes (proposer, self-review, reviewer, judge, reflector, curator)
goes through :func:`ask_json` (a one-message question through :func:`ask_one`).  The schema
travels as ``response_format`` (OpenAI) or a forced tool (Anthropic); an upstream that refuses
it is remembered and asked in plain words instead (``reef_core.daemon.model_calls``), so the
answer is parsed from text either way: a small model behind llama.cpp gave no JSON object
without a schema and schema-shaped JSON with one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from reef_core.errors import ReefError
from reef_core.learning.model import ModelCaller

__all__ = ["RETRY_REQUEST", "Unusable", "ask_json", "ask_one", "parse_json_object", "schema"]

T = TypeVar("T")

RETRY_REQUEST = """That answer could not be used: {problem}
Answer again with only the JSON object."""


class Unusable(ReefError):
    """The model's answers stayed unusable within the retries; the message has the last reason."""

    code = "unusable_answer"


def schema(name: str, properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """A named JSON schema for an object with ``properties`` (all required unless told)."""
    return {
        "name": name,
        "schema": {
            "type": "object",
            "properties": properties,
            "required": list(properties) if required is None else required,
            "additionalProperties": False,
        },
    }


def parse_json_object(text: str) -> dict[str, Any]:
    """The first JSON object in a model's answer (code fences and chatter around it allowed)."""
    cleaned = text.strip()
    if cleaned.startswith("```"):
        cleaned = cleaned.split("\n", 1)[1] if "\n" in cleaned else ""
        cleaned = cleaned.rsplit("```", 1)[0]
    decoder = json.JSONDecoder()
    start = cleaned.find("{")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(cleaned, start)
        except ValueError:
            start = cleaned.find("{", start + 1)
            continue
        if isinstance(value, dict):
            return value
        start = cleaned.find("{", start + 1)
    raise ValueError("the answer holds no JSON object")


def ask_json(
    model: ModelCaller,
    conversation: list[dict[str, str]],
    *,
    system: str,
    shape: dict[str, Any],
    check: Callable[[dict[str, Any]], T],
    retries: int = 2,
    max_tokens: int = 2048,
) -> tuple[T, int]:
    """Ask until ``check`` accepts the answer's JSON object; returns its result and the retries used.

    ``conversation`` grows with each answer and each "could not be used" reply (so a caller can
    go on with the same conversation).  ``check`` raises ``ValueError`` (or ``KeyError``) with
    the reason an answer is unusable; after ``retries`` resends, :class:`Unusable` is raised.
    """
    problem = ""
    for attempt in range(retries + 1):
        answer = model.complete(conversation, system=system, max_tokens=max_tokens, schema=shape)
        conversation.append({"role": "assistant", "content": answer})
        try:
            return check(parse_json_object(answer)), attempt
        except (ValueError, KeyError, TypeError) as exc:
            problem = str(getattr(exc, "message", None) or exc)
            if attempt < retries:
                conversation.append({"role": "user", "content": RETRY_REQUEST.format(problem=problem)})
    raise Unusable(f"the answer was unusable {retries + 1} times; last: {problem}")


def ask_one(
    model: ModelCaller,
    prompt: str,
    *,
    system: str,
    shape: dict[str, Any],
    check: Callable[[dict[str, Any]], T],
    retries: int = 2,
    max_tokens: int = 2048,
) -> T:
    """:func:`ask_json` on a conversation of one user message, ``prompt``: ``check``'s result."""
    result, _ = ask_json(
        model,
        [{"role": "user", "content": prompt}],
        system=system,
        shape=shape,
        check=check,
        retries=retries,
        max_tokens=max_tokens,
    )
    return result
