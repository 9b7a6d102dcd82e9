"""OpenAI Chat Completions shapes: error bodies, stream assembly and reef's receipt chunk.

Owns: what reef itself writes in the OpenAI dialect (``error_body``, ``receipt_chunk``) and
folding a ``chat.completion.chunk`` stream back into the one ``chat.completion`` a
non-streaming call would have returned (``ChatStreamAssembler``), so a streamed exchange can
be recorded like any other.  Does not own: translation to or from Anthropic (``translate``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reef_core.errors import InvalidInput

__all__ = ["ChatStreamAssembler", "error_body", "guess_tool_index", "receipt_chunk"]

_RECEIPT_ID = "chatcmpl-reef"


def error_body(
    message: str, type: str = "invalid_request_error", code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """The body OpenAI returns with a 4xx/5xx; the SDK reads ``error.message`` from it."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def receipt_chunk(template: dict[str, Any] | None, record_id: str) -> dict[str, Any]:
    """The extra chunk reef sends just before ``data: [DONE]``, naming the stored record.

    ``choices`` is empty, like the usage chunk, so clients that only read choices skip it
    and the openai SDK still validates it.  id/created/model copy a real chunk of the same
    stream (pass the last one) so that clients checking consistency see nothing odd.

    ``usage`` and ``system_fingerprint`` are copied too when the template has them: the
    SDK's stream helper (``ChatCompletionStreamState``) takes both from the *last* chunk, so
    a receipt without them would erase the usage the client just received.
    """
    template = template or {}
    chunk: dict[str, Any] = {
        "id": template.get("id") or _RECEIPT_ID,
        "object": "chat.completion.chunk",
        "created": template.get("created") or 0,
        "model": template.get("model") or "",
        "choices": [],
    }
    for key in ("usage", "system_fingerprint"):
        if template.get(key) is not None:
            chunk[key] = template[key]
    chunk["reef"] = {"agent_record_id": record_id}
    return chunk


# mutable on purpose: these accumulate one stream's deltas and never leave the assembler
@dataclass
class _ToolCall:
    id: str = ""
    type: str = "function"
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _Choice:
    role: str = "assistant"
    content: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    tool_calls: dict[int, _ToolCall] = field(default_factory=dict)
    finish_reason: str | None = None
    logprobs: dict[str, list[Any]] | None = None


class ChatStreamAssembler:
    """Feed every parsed chunk of one stream; ``result()`` is the equivalent completion."""

    def __init__(self) -> None:
        self._id = ""
        self._created = 0
        self._model = ""
        self._fingerprint: str | None = None
        self._service_tier: str | None = None
        self._usage: dict[str, Any] | None = None
        self._choices: dict[int, _Choice] = {}

    def feed(self, chunk: dict[str, Any]) -> None:
        if not isinstance(chunk, dict):
            raise InvalidInput("a stream chunk must be a JSON object", field="chunk")
        # the first non-empty value wins: later chunks repeat the same id/model anyway
        self._id = self._id or str(chunk.get("id") or "")
        self._created = self._created or _int(chunk.get("created"))
        self._model = self._model or str(chunk.get("model") or "")
        if chunk.get("system_fingerprint"):
            self._fingerprint = chunk["system_fingerprint"]
        if chunk.get("service_tier"):
            self._service_tier = chunk["service_tier"]
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise InvalidInput("choices must be a list", field="choices")
        for i, raw in enumerate(choices):
            self._feed_choice(raw, f"choices[{i}]")

    def _feed_choice(self, raw: Any, where: str) -> None:
        if not isinstance(raw, dict):
            raise InvalidInput("a choice must be an object", field=where)
        index = _index(raw.get("index", 0), f"{where}.index")
        choice = self._choices.setdefault(index, _Choice())
        if raw.get("finish_reason"):
            choice.finish_reason = raw["finish_reason"]
        if isinstance(raw.get("logprobs"), dict):
            merged = choice.logprobs if choice.logprobs is not None else {}
            for key, items in raw["logprobs"].items():
                if isinstance(items, list):
                    merged.setdefault(key, []).extend(items)
            choice.logprobs = merged
        delta = raw.get("delta") or {}
        if not isinstance(delta, dict):
            raise InvalidInput("delta must be an object", field=f"{where}.delta")
        if delta.get("role"):
            choice.role = delta["role"]
        if isinstance(delta.get("content"), str):
            choice.content.append(delta["content"])
        if isinstance(delta.get("refusal"), str):
            choice.refusal.append(delta["refusal"])
        calls = delta.get("tool_calls") or []
        if not isinstance(calls, list):
            raise InvalidInput("tool_calls must be a list", field=f"{where}.delta.tool_calls")
        for j, call in enumerate(calls):
            self._feed_call(choice, call, f"{where}.delta.tool_calls[{j}]")

    @staticmethod
    def _feed_call(choice: _Choice, call: Any, where: str) -> None:
        if not isinstance(call, dict):
            raise InvalidInput("a tool call delta must be an object", field=where)
        if "index" in call:
            index = _index(call["index"], f"{where}.index")
        else:
            index = guess_tool_index({i: c.id for i, c in choice.tool_calls.items()}, call.get("id"))
        slot = choice.tool_calls.setdefault(index, _ToolCall())
        if call.get("id"):
            slot.id = call["id"]
        if call.get("type"):
            slot.type = call["type"]
        function = call.get("function") or {}
        if not isinstance(function, dict):
            raise InvalidInput("function must be an object", field=f"{where}.function")
        # the name comes whole in one delta; some servers repeat it, so never concatenate
        if function.get("name") and not slot.name:
            slot.name = function["name"]
        if isinstance(function.get("arguments"), str):
            slot.arguments.append(function["arguments"])

    def result(self) -> dict[str, Any]:
        choices = [self._choice_result(i, self._choices[i]) for i in sorted(self._choices)]
        body: dict[str, Any] = {
            "id": self._id,
            "object": "chat.completion",
            "created": self._created,
            "model": self._model,
            "choices": choices,
        }
        if self._usage is not None:
            body["usage"] = self._usage
        if self._fingerprint is not None:
            body["system_fingerprint"] = self._fingerprint
        if self._service_tier is not None:
            body["service_tier"] = self._service_tier
        return body

    @staticmethod
    def _choice_result(index: int, choice: _Choice) -> dict[str, Any]:
        # a non-streaming reply has content null (not "") when the model only called tools
        message: dict[str, Any] = {"role": choice.role, "content": "".join(choice.content) or None}
        if choice.refusal:
            message["refusal"] = "".join(choice.refusal)
        if choice.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": call.type,
                    "function": {"name": call.name, "arguments": "".join(call.arguments)},
                }
                for _, call in sorted(choice.tool_calls.items())
            ]
        return {
            "index": index,
            "message": message,
            "logprobs": choice.logprobs,
            "finish_reason": choice.finish_reason,
        }


def guess_tool_index(ids: dict[int, str], call_id: Any) -> int:
    """The index of a tool-call delta that carries none (some OpenAI-compatible servers omit
    it): a new id starts a new call, a known id is that call, no id continues the last one.
    ``ids`` maps the indexes seen so far to their call ids."""
    for index, known in ids.items():
        if call_id and known == call_id:
            return index
    if call_id or not ids:
        return max(ids, default=-1) + 1
    return max(ids)


def _index(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput("index must be a non-negative integer", field=where)
    return value


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
