"""Responses API streams: chat chunks as Responses events, and the events folded back into one Response.

Owns: ``ChatToResponsesStream`` (``chat.completion.chunk`` dicts in, ``(event, data)`` pairs
out, in the order OpenAI sends them: ``response.created``, ``response.in_progress``, each
output item from ``output_item.added`` to ``output_item.done``, then ``response.completed``
or ``response.incomplete``), ``ResponsesStreamAssembler`` (any Responses stream, forwarded or
translated, back into the Response a non-streaming call would have returned, so it can be
recorded), the ``response.failed`` or ``error`` event for a stream that broke, and the receipt
on the terminal event (``with_response_receipt``).

Every event carries ``type`` and a ``sequence_number`` counting from 0; the stream ends with
its terminal event (the Responses API sends no ``[DONE]``).  Item ids are stable across an
item's events (``msg_<response>_<index>``), as the SDK's stream helper checks.
Does not own: the objects themselves (``responses_api``) or the SSE framing (``sse``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from reef_core.errors import InvalidInput
from reef_core.wire.content import fallback_tool_id
from reef_core.wire.openai import guess_tool_index
from reef_core.wire.responses_api import (
    function_call_item,
    item_id,
    message_item,
    reasoning_item,
    response_object,
    response_usage,
    text_part,
    tool_names,
)
from reef_core.wire.shapes import expect_array, expect_object
from reef_core.wire.streams import UpstreamStreamError

__all__ = [
    "TERMINAL_EVENTS",
    "ChatToResponsesStream",
    "ResponsesStreamAssembler",
    "with_response_receipt",
]

#: the events that end a Responses stream
TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}

Event = tuple[str, dict[str, Any]]


def with_response_receipt(data: dict[str, Any], record_id: str) -> dict[str, Any]:
    """The terminal event's data, carrying the stored record's id.

    On the event (``event.reef``, the original Reef's place for it) and on its response as
    well: the SDK's ``responses.stream()`` helper rebuilds the terminal event and keeps only
    the response, where extra keys survive (``get_final_response().reef``).
    """
    receipt = {"agent_record_id": record_id}
    out = {**data, "reef": receipt}
    if isinstance(data.get("response"), dict):
        out["response"] = {**data["response"], "reef": receipt}
    return out


# mutable on purpose: these accumulate one stream's deltas and never leave the translator
@dataclass
class _Part:
    kind: str  # "output_text", "refusal" or "reasoning_text"
    pieces: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def body(self) -> dict[str, Any]:
        if self.kind == "output_text":
            return text_part(self.text)
        if self.kind == "refusal":
            return {"type": "refusal", "refusal": self.text}
        return {"type": "reasoning_text", "text": self.text}


@dataclass
class _Item:
    kind: str  # "message", "reasoning" or "function_call"
    index: int
    id: str
    parts: list[_Part] = field(default_factory=list)
    call_id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    closed: bool = False

    names: dict[str, tuple[str, str]] | None = None  # the request's namespaced tools (tool_names)

    def body(self, status: str = "completed") -> dict[str, Any]:
        if self.kind == "function_call":
            arguments = "".join(self.arguments)
            return function_call_item(self.id, self.call_id, self.name, arguments, status, names=self.names)
        if self.kind == "reasoning":
            return reasoning_item(self.id, "".join(p.text for p in self.parts), status)
        return message_item(self.id, [p.body() for p in self.parts], status)


class ChatToResponsesStream:
    """``chat.completion.chunk`` dicts in, Responses stream ``(event, data)`` pairs out.

    Only choice 0 is relayed.  ``finish`` (at ``[DONE]``, or when an Anthropic upstream's
    message ends) closes what is open and gives the terminal event last; ``response`` is then
    the whole Response.
    """

    def __init__(self, request: dict[str, Any], *, response_id: str, created_at: int) -> None:
        self._request = request
        self._names = tool_names(request)
        self._id = response_id
        self._created = created_at
        self._model = str(request.get("model") or "")
        self._sequence = 0
        self._started = False
        self._items: list[_Item] = []
        self._open: _Item | None = None
        self._tools: dict[int, _Item] = {}
        self._finish_reason: str | None = None
        self._usage: Any = None
        self.response: dict[str, Any] | None = None

    @property
    def done(self) -> bool:
        return self.response is not None

    def feed(self, chunk: dict[str, Any]) -> list[Event]:
        chunk = expect_object(chunk, "chunk")
        if chunk.get("error"):  # some OpenAI-compatible servers report failures in-stream
            error = chunk["error"] if isinstance(chunk["error"], dict) else {"message": str(chunk["error"])}
            raise UpstreamStreamError(str(error.get("message") or "the upstream stream failed"))
        if self.done:
            return []
        out: list[Event] = []
        if not self._started and chunk.get("model"):
            self._model = str(chunk["model"])
        self._start(out)
        for i, choice in enumerate(expect_array(chunk.get("choices") or [], "choices")):
            choice = expect_object(choice, f"choices[{i}]")
            if choice.get("index", 0) != 0:
                continue
            delta = expect_object(choice.get("delta") or {}, f"choices[{i}].delta")
            thought = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(thought, str) and thought:
                self._text("reasoning", "reasoning_text", thought, out)
            if isinstance(delta.get("content"), str) and delta["content"]:
                self._text("message", "output_text", delta["content"], out)
            if isinstance(delta.get("refusal"), str) and delta["refusal"]:
                self._text("message", "refusal", delta["refusal"], out)
            calls = expect_array(delta.get("tool_calls") or [], f"choices[{i}].delta.tool_calls")
            for j, call in enumerate(calls):
                self._tool(expect_object(call, f"choices[{i}].delta.tool_calls[{j}]"), out)
            if choice.get("finish_reason"):
                self._finish_reason = str(choice["finish_reason"])
                self._close(out)
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        return out

    def finish(self, completed_at: int) -> list[Event]:
        """Close what is open and end the response; the last event is the terminal one."""
        if self.done:
            return []
        out: list[Event] = []
        self._start(out)
        self._close(out)
        incomplete = _INCOMPLETE.get(self._finish_reason or "")
        self.response = response_object(
            self._request,
            response_id=self._id,
            created_at=self._created,
            model=self._model,
            status="incomplete" if incomplete else "completed",
            output=[item.body() for item in self._items],
            usage=response_usage(self._usage),
            incomplete=incomplete,
            completed_at=completed_at,
        )
        kind = "response.incomplete" if incomplete else "response.completed"
        out.append(self._event(kind, response=self.response))
        return out

    # -- the parts of a stream ----------------------------------------------------------------------

    def _start(self, out: list[Event]) -> None:
        if self._started:
            return
        self._started = True
        for kind in ("response.created", "response.in_progress"):
            snapshot = response_object(
                self._request,
                response_id=self._id,
                created_at=self._created,
                model=self._model,
                status="in_progress",
                output=[],
            )
            out.append(self._event(kind, response=snapshot))

    def _text(self, kind: str, part_kind: str, text: str, out: list[Event]) -> None:
        item = self._open
        if item is None or item.kind != kind:
            prefix = "rs" if kind == "reasoning" else "msg"
            item = self._open_item(
                _Item(kind, len(self._items), item_id(prefix, self._id, len(self._items))), out
            )
        part = item.parts[-1] if item.parts else None
        if part is None or part.kind != part_kind:
            if part is not None:
                self._close_part(item, out)
            part = _Part(part_kind)
            item.parts.append(part)
            out.append(self._event("response.content_part.added", **self._where(item), part=part.body()))
        part.pieces.append(text)
        delta_kind = {"output_text": "output_text", "refusal": "refusal", "reasoning_text": "reasoning_text"}
        out.append(
            self._event(f"response.{delta_kind[part_kind]}.delta", **self._delta(item, part), delta=text)
        )

    def _tool(self, call: dict[str, Any], out: list[Event]) -> None:
        ids = {index: item.call_id for index, item in self._tools.items()}
        tool = call["index"] if isinstance(call.get("index"), int) else guess_tool_index(ids, call.get("id"))
        function: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else {}
        item = self._tools.get(tool)
        if item is None:
            index = len(self._items)
            item = _Item("function_call", index, item_id("fc", self._id, index), names=self._names)
            item.call_id = str(call.get("id") or fallback_tool_id(self._id, len(self._tools)))
            item.name = str(function.get("name") or "")
            self._tools[tool] = self._open_item(item, out)
        elif function.get("name") and not item.name:
            item.name = str(function["name"])
        fragment = function.get("arguments")
        if isinstance(fragment, str) and fragment:
            if item.closed:
                # an item's events run from added to done; OpenAI sends each call's arguments in one run
                raise InvalidInput(f"arguments for tool call {tool} after it ended", field="tool_calls")
            item.arguments.append(fragment)
            out.append(self._arguments(item, "delta", delta=fragment))

    def _open_item(self, item: _Item, out: list[Event]) -> _Item:
        self._close(out)
        self._items.append(item)
        self._open = item
        out.append(
            self._event("response.output_item.added", output_index=item.index, item=item.body("in_progress"))
        )
        return item

    def _close(self, out: list[Event]) -> None:
        item, self._open = self._open, None
        if item is None:
            return
        item.closed = True
        if item.kind == "function_call":
            out.append(self._arguments(item, "done", arguments="".join(item.arguments)))
        elif item.parts:
            self._close_part(item, out)
        out.append(self._event("response.output_item.done", output_index=item.index, item=item.body()))

    def _close_part(self, item: _Item, out: list[Event]) -> None:
        part = item.parts[-1]
        done: dict[str, Any] = {"text": part.text}
        if part.kind == "refusal":
            done = {"refusal": part.text}
        elif part.kind == "output_text":
            done["logprobs"] = []
        name = {"output_text": "output_text", "refusal": "refusal", "reasoning_text": "reasoning_text"}[
            part.kind
        ]
        out.append(self._event(f"response.{name}.done", **self._delta(item, part, logprobs=False), **done))
        out.append(self._event("response.content_part.done", **self._where(item), part=part.body()))

    def _arguments(self, item: _Item, stage: str, **fields: Any) -> Event:
        """``response.function_call_arguments.<stage>`` of a function call item."""
        kind = f"response.function_call_arguments.{stage}"
        return self._event(kind, item_id=item.id, output_index=item.index, **fields)

    def _where(self, item: _Item) -> dict[str, Any]:
        return {"item_id": item.id, "output_index": item.index, "content_index": len(item.parts) - 1}

    def _delta(self, item: _Item, part: _Part, *, logprobs: bool = True) -> dict[str, Any]:
        where = self._where(item)
        if logprobs and part.kind == "output_text":
            where["logprobs"] = []
        return where

    def _event(self, kind: str, **fields: Any) -> Event:
        data = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return kind, data


class ResponsesStreamAssembler:
    """Feed the data of every event of one Responses stream; ``result()`` is its Response.

    The terminal event carries the whole Response; a stream cut before it is assembled from
    the last lifecycle snapshot and the items seen so far.  Unknown events are skipped.
    """

    def __init__(self) -> None:
        self._snapshot: dict[str, Any] | None = None
        self._final: dict[str, Any] | None = None
        self._items: dict[int, dict[str, Any]] = {}
        #: the last ``sequence_number`` seen (-1 before any)
        self.sequence = -1
        #: the type of the terminal event, once one came
        self.terminal: str | None = None

    @property
    def started(self) -> bool:
        return self._snapshot is not None

    def feed(self, data: dict[str, Any]) -> None:
        data = expect_object(data, "data")
        if isinstance(data.get("sequence_number"), int):
            self.sequence = max(self.sequence, data["sequence_number"])
        kind = data.get("type")
        response = data.get("response")
        if kind in ("response.created", "response.queued", "response.in_progress") and isinstance(
            response, dict
        ):
            self._snapshot = copy.deepcopy(response)
        elif kind in TERMINAL_EVENTS and isinstance(response, dict):
            self._final = copy.deepcopy(response)
            self.terminal = str(kind)
        elif kind in ("response.output_item.added", "response.output_item.done"):
            index, item = data.get("output_index"), data.get("item")
            if isinstance(index, int) and isinstance(item, dict):
                self._items[index] = copy.deepcopy(item)
        elif kind == "response.content_part.added":
            item = self._item(data)
            if item is not None and isinstance(data.get("part"), dict):
                item.setdefault("content", []).append(copy.deepcopy(data["part"]))
        elif kind in (
            "response.output_text.delta",
            "response.reasoning_text.delta",
            "response.refusal.delta",
        ):
            self._append_text(data, "refusal" if kind == "response.refusal.delta" else "text")
        elif kind == "response.function_call_arguments.delta":
            item = self._item(data)
            if item is not None and isinstance(data.get("delta"), str):
                item["arguments"] = str(item.get("arguments") or "") + data["delta"]

    def _item(self, data: dict[str, Any]) -> dict[str, Any] | None:
        index = data.get("output_index")
        return self._items.get(index) if isinstance(index, int) else None

    def _append_text(self, data: dict[str, Any], key: str) -> None:
        item = self._item(data)
        content = item.get("content") if item is not None else None
        index = data.get("content_index", 0)
        if isinstance(content, list) and isinstance(index, int) and 0 <= index < len(content):
            part = content[index]
            if isinstance(part, dict) and isinstance(data.get("delta"), str):
                part[key] = str(part.get(key) or "") + data["delta"]

    def result(self) -> dict[str, Any]:
        """The Response: the terminal event's, else what the stream carried before it broke."""
        items = [self._items[i] for i in sorted(self._items)]
        if self._final is not None:
            if not self._final.get("output") and items:
                return {**self._final, "output": items}
            return self._final
        if self._snapshot is None:
            raise InvalidInput("the stream ended before response.created", field="response")
        return {**self._snapshot, "output": items}

    def failure(self, message: str) -> Event:
        """The event that ends a stream which broke: ``response.failed`` once the response was
        announced (its output what came so far), else an ``error`` event."""
        sequence = self.sequence + 1
        if self._snapshot is None:
            error = {"type": "error", "sequence_number": sequence, "code": "server_error", "message": message}
            return "error", {**error, "param": None}
        response = {
            **self.result(),
            "status": "failed",
            "error": {"code": "server_error", "message": message},
        }
        return "response.failed", {
            "type": "response.failed",
            "sequence_number": sequence,
            "response": response,
        }
