"""Anthropic Messages shapes: error bodies, stream assembly and reef's receipt.

Owns: what reef itself writes in the Anthropic dialect (``error_body``, ``with_receipt``) and
folding a Messages event stream back into the one ``message`` a non-streaming call would have
returned (``MessageStreamAssembler``), so a streamed exchange can be recorded like any other.
Does not own: translation to or from OpenAI (``translate``).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from reef_core.errors import InvalidInput

__all__ = ["MessageStreamAssembler", "error_body", "parse_tool_input", "with_receipt"]


def error_body(message: str, type: str = "invalid_request_error") -> dict[str, Any]:
    """The body Anthropic returns with a 4xx/5xx (and the data of a mid-stream ``error``)."""
    return {"type": "error", "error": {"type": type, "message": message}}


def with_receipt(message_stop_data: dict[str, Any], record_id: str) -> dict[str, Any]:
    """The ``message_stop`` data reef forwards, carrying the stored record's id.

    The receipt rides on the last real event instead of a new event type, because clients
    (the SDK included) may reject event names they do not know; extra keys they ignore.
    """
    return {**message_stop_data, "reef": {"agent_record_id": record_id}}


class MessageStreamAssembler:
    """Feed every event of one stream; ``result()`` is the equivalent ``message``.

    Unknown events and delta types are skipped rather than refused: Anthropic documents that
    new ones may appear, and a recorder must not break a stream the client is happily reading.
    """

    def __init__(self) -> None:
        self._message: dict[str, Any] = {}
        self._usage: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        # partial_json fragments per block index; parsed once, in result()
        self._json: dict[int, list[str]] = {}
        self._complete = False
        self._error: dict[str, Any] | None = None

    @property
    def complete(self) -> bool:
        """True once ``message_stop`` was seen: the message is whole."""
        return self._complete

    @property
    def error(self) -> dict[str, Any] | None:
        """The ``error`` object of a mid-stream error event, if one arrived."""
        return self._error

    def feed(self, event: str, data: dict[str, Any]) -> None:
        if not isinstance(data, dict):
            raise InvalidInput(f"the data of a {event} event must be a JSON object", field="data")
        if event == "message_start":
            message = data.get("message")
            if not isinstance(message, dict):
                raise InvalidInput("message_start carries no message", field="message")
            self._message = copy.deepcopy(message)
            self._merge_usage(message.get("usage"))
        elif event == "content_block_start":
            block = data.get("content_block")
            if not isinstance(block, dict):
                raise InvalidInput("content_block_start carries no block", field="content_block")
            self._blocks[_index(data)] = copy.deepcopy(block)
        elif event == "content_block_delta":
            self._delta(_index(data), data.get("delta"))
        elif event == "message_delta":
            delta = data.get("delta")
            if isinstance(delta, dict):
                self._message.update(delta)
            self._merge_usage(data.get("usage"))
        elif event == "message_stop":
            self._complete = True
        elif event == "error":
            error = data.get("error")
            self._error = error if isinstance(error, dict) else {"type": "error", "message": str(error)}
        # ping, content_block_stop and events added after this was written change nothing

    def _delta(self, index: int, delta: Any) -> None:
        if not isinstance(delta, dict):
            raise InvalidInput("content_block_delta carries no delta", field="delta")
        # a delta before its block start is malformed, but the text is still worth keeping
        block = self._blocks.setdefault(index, _block_for(delta))
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + str(delta.get("text", ""))
        elif kind == "input_json_delta":
            self._json.setdefault(index, []).append(str(delta.get("partial_json", "")))
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + str(delta.get("thinking", ""))
        elif kind == "signature_delta":
            block["signature"] = block.get("signature", "") + str(delta.get("signature", ""))
        elif kind == "citations_delta" and "citation" in delta:
            block.setdefault("citations", [])
            if block["citations"] is None:
                block["citations"] = []
            block["citations"].append(delta["citation"])

    def _merge_usage(self, usage: Any) -> None:
        # message_delta's counts are cumulative and win, but a null there must not erase a
        # count message_start already gave
        if isinstance(usage, dict):
            for key, value in usage.items():
                if value is not None or key not in self._usage:
                    self._usage[key] = value

    def result(self) -> dict[str, Any]:
        content = []
        for index in sorted(self._blocks):
            block = dict(self._blocks[index])
            if index in self._json:
                block["input"] = parse_tool_input("".join(self._json[index]))
            content.append(block)
        message = {
            "id": "",
            "type": "message",
            "role": "assistant",
            "model": "",
            "stop_reason": None,
            "stop_sequence": None,
            **self._message,
        }
        message["content"] = content
        message["usage"] = {"input_tokens": 0, "output_tokens": 0, **self._usage}
        return message


def parse_tool_input(raw: str) -> dict[str, Any]:
    """A tool call's JSON arguments as a tool_use ``input``: ``""`` is ``{}``, and text that is
    not a JSON object is kept verbatim under ``_raw`` rather than lost or fatal."""
    if not raw.strip():
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {"_raw": raw}
    return parsed if isinstance(parsed, dict) else {"_raw": raw}


def _index(data: dict[str, Any]) -> int:
    index = data.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise InvalidInput("index must be a non-negative integer", field="index")
    return index


def _block_for(delta: dict[str, Any]) -> dict[str, Any]:
    kind = delta.get("type")
    if kind == "input_json_delta":
        return {"type": "tool_use", "id": "", "name": "", "input": {}}
    if kind in ("thinking_delta", "signature_delta"):
        return {"type": "thinking", "thinking": "", "signature": ""}
    return {"type": "text", "text": ""}
