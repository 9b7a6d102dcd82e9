"""One JSON answer from the served model: a schema when the upstream takes one, parse and check
it, and send an unusable answer back with the reason, a bounded number of times.

Every model call reefine makes (proposer, self-review, reviewer, judge, reflector, curator)
goes through :func:`ask_json` (a one-message question through :func:`ask_one`).  The schema
travels as ``response_format`` (OpenAI) or a forced tool (Anthropic); an upstream that refuses
it is remembered and asked in plain words instead (``reef_core.daemon.model_calls``), so the
answer is parsed from text either way: a small model behind llama.cpp gave no JSON object
without a schema and schema-shaped JSON with one.

**Schemas that fit the answer's budget** (:func:`fit`).  An upstream that constrains decoding
(reef's own models, llama.cpp) makes every answer a prefix of a document the schema accepts;
one that ends at ``max_tokens`` is a prefix cut short, not JSON.  A small model does run on
inside a string (seen with SmolLM2: a skill's ``content`` of 700 tokens of digits).  So each
schema is sent with bounds under which its longest document fits the call's ``max_tokens``:
every array declares ``maxItems``, every integer its ``minimum`` and ``maximum``, every object
``additionalProperties: false``, every string its ``maxLength``.  When the longest compact
document, counted one token per character (the fewest characters a token has; a ``\\uXXXX``
escape can cost more), would take more than 90% of ``max_tokens``, the free strings' maxima
(those without a ``pattern``) shrink by one factor until it fits.  At reefine's default of
4,096 tokens a proposal's ``content`` may hold about a thousand characters in each of three
changes (6,000 from a budget of about 22,000); an upstream that does not constrain takes the
bounds as guidance.  A
schema that breaks these rules is a programming error, raised by :func:`fit` (and found by the
tests, which fit every reefine schema).

**Refused, not unusable.**  An answer that holds no JSON object is *unusable*; one that parses
but that ``check`` turns down (a name taken, an update of a missing entry) is *refused*, with
the reason.  The last failure's kind names the error a step ends with.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, TypeVar

from reef_core.errors import ReefError
from reef_core.learning.model import ModelCaller

__all__ = [
    "RETRY_REQUEST",
    "Unusable",
    "ask_json",
    "ask_one",
    "fit",
    "longest",
    "parse_json_object",
    "schema",
]

T = TypeVar("T")

RETRY_REQUEST = """That answer could not be used: {problem}
Answer again with only the JSON object."""


class Unusable(ReefError):
    """The model's answers stayed unusable (or refused) within the retries; the message has the
    last reason."""

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


#: the share of ``max_tokens`` the longest document a fitted schema accepts may take
_ROOM = 0.9


def fit(shape: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """``shape`` (a :func:`schema`) with its free strings' ``maxLength`` shrunk where needed so
    that the longest compact document it accepts fits ``max_tokens`` (the module docstring);
    ``shape`` itself is not changed.  Raises ``ValueError`` for a schema that leaves something
    unbounded, or whose fixed parts alone do not fit.

    Every structured call fits its schema, most of them the same few constant ones: the fitted
    schema is kept by its JSON text (a walk and a deep copy cost 0.25 ms, a third of a usage
    step's null replay gate in ``bench/usage.py``), and each call gets a fresh copy of it."""
    return json.loads(_fitted(_compact(shape), max_tokens))


@functools.lru_cache(maxsize=128)
def _fitted(shape_text: str, max_tokens: int) -> str:
    shape = json.loads(shape_text)
    fitted = shape["schema"]
    free: list[tuple[dict[str, Any], int]] = []
    fixed = _longest(fitted, 1, free)
    wanted = sum(node["maxLength"] * times for node, times in free)
    room = int(max_tokens * _ROOM) - fixed
    if free and room < sum(max(1, node.get("minLength", 0)) * times for node, times in free):
        raise ValueError(
            f"schema {shape['name']!r} cannot fit {max_tokens} tokens: its fixed parts take {fixed}"
        )
    if wanted > room:
        for node, _ in free:
            node["maxLength"] = max(1, node.get("minLength", 0), node["maxLength"] * room // wanted)
    return json.dumps({**shape, "schema": fitted})


def longest(node: dict[str, Any]) -> int:
    """The characters of the longest compact JSON document ``node`` accepts (ASCII strings)."""
    return _longest(node, 1, None)


def _longest(node: dict[str, Any], times: int, free: list[tuple[dict[str, Any], int]] | None) -> int:
    """:func:`longest`, with the free strings (no ``pattern``) left out and collected in
    ``free`` with how often they can occur (when ``free`` is not ``None``)."""
    if "enum" in node or "const" in node:
        return max(len(_compact(v)) for v in node.get("enum", [node.get("const")]))
    if "anyOf" in node:
        return max(_longest(branch, times, free) for branch in node["anyOf"])
    kind = node.get("type")
    if kind == "object":
        if node.get("additionalProperties") is not False:
            raise ValueError("an object must set additionalProperties: false")
        properties = node.get("properties", {})
        fields = [len(_compact(key)) + 1 + _longest(value, times, free) for key, value in properties.items()]
        return 2 + sum(fields) + max(len(fields) - 1, 0)
    if kind == "array":
        if "maxItems" not in node:
            raise ValueError("an array must set maxItems")
        items = node["maxItems"]
        return 2 + items * (_longest(node["items"], times * items, free) + 1)
    if kind == "string":
        if "maxLength" not in node:
            raise ValueError("a string must set maxLength")
        if free is None or "pattern" in node:
            return node["maxLength"] + 2
        free.append((node, times))
        return 2
    if kind == "integer":
        if "minimum" not in node or "maximum" not in node:
            raise ValueError("an integer must set minimum and maximum")
        return max(len(str(node["minimum"])), len(str(node["maximum"])))
    if kind == "boolean":
        return 5
    raise ValueError(f"reefine's schemas take no {kind!r} values")


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


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
    problem, parsed = "", False
    shape = fit(shape, max_tokens)
    for attempt in range(retries + 1):
        answer = model.complete(conversation, system=system, max_tokens=max_tokens, schema=shape)
        conversation.append({"role": "assistant", "content": answer})
        try:
            value = parse_json_object(answer)
        except ValueError as exc:
            problem, parsed = str(exc), False
        else:
            try:
                return check(value), attempt
            except (ValueError, KeyError, TypeError) as exc:
                problem, parsed = str(getattr(exc, "message", None) or exc), True
        if attempt < retries:
            conversation.append({"role": "user", "content": RETRY_REQUEST.format(problem=problem)})
    times = "once" if retries == 0 else f"{retries + 1} times"
    raise Unusable(f"the answer was {'refused' if parsed else 'unusable'} {times}; last: {problem}")


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
