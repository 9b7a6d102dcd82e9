"""Streams from one dialect to the other, an event or chunk at a time.

Owns: ``AnthropicToOpenAIStream`` (Messages events in, ``chat.completion.chunk`` dicts out),
``OpenAIToAnthropicStream`` (the reverse) and ``UpstreamStreamError``, raised when the
upstream reports an error after its stream began.  Each translator gives what a non-streaming
translation (``responses``) of the same reply would give.
Does not own: the SSE framing (``sse``) or stream assembly (``openai``/``anthropic``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reef_core.errors import InvalidInput, UpstreamError
from reef_core.wire.content import TEXT_JOIN, compact_json, fallback_tool_id
from reef_core.wire.openai import guess_tool_index
from reef_core.wire.outcome import finish_reason_for, stop_reason_for, usage_to_anthropic, usage_to_openai
from reef_core.wire.shapes import expect_array, expect_object

__all__ = ["AnthropicToOpenAIStream", "OpenAIToAnthropicStream", "UpstreamStreamError"]


class UpstreamStreamError(UpstreamError):
    """The upstream reported an error in the middle of a stream it had already started."""

    code = "upstream_error"

    def __init__(self, message: str, *, error_type: str = "api_error") -> None:
        super().__init__(message)
        self.error_type = error_type


@dataclass
class _Block:
    """An Anthropic content block being relayed (mutable: the relay updates it per delta)."""

    kind: str  # "text", "tool" or "skip"
    tool: int = 0
    start_input: Any = None
    sent_text: bool = False
    sent_arguments: bool = False


class AnthropicToOpenAIStream:
    """Messages stream events in, ``chat.completion.chunk`` dicts out."""

    def __init__(self, model: str, created: int = 0) -> None:
        self._model = model
        self._created = created
        self._id = ""
        self._started = False
        self._blocks: dict[int, _Block] = {}
        self._tools = 0
        self._wrote_text = False
        self._usage: dict[str, Any] = {}
        self._finished = False
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, event: str, data: dict[str, Any]) -> list[dict[str, Any]]:
        data = expect_object(data, "data")
        if event == "error":
            raise _upstream_error(data.get("error"))
        if self._done or event not in _ANTHROPIC_EVENTS:
            return []  # ping, and event types newer than this code
        out: list[dict[str, Any]] = []
        if event == "message_start":
            started = expect_object(data.get("message"), "message")
            self._id = str(started.get("id") or "")
            self._merge_usage(started.get("usage"))
        if not self._started:
            self._started = True
            out.append(self._chunk({"role": "assistant", "content": ""}))
        if event == "content_block_start":
            self._block_start(
                _stream_index(data), expect_object(data.get("content_block"), "content_block"), out
            )
        elif event == "content_block_delta":
            self._block_delta(_stream_index(data), expect_object(data.get("delta"), "delta"), out)
        elif event == "content_block_stop":
            self._block_stop(_stream_index(data), out)
        elif event == "message_delta":
            self._merge_usage(data.get("usage"))
            delta: dict[str, Any] = data["delta"] if isinstance(data.get("delta"), dict) else {}
            if delta.get("stop_reason") and not self._finished:
                self._finished = True
                out.append(self._chunk({}, finish_reason_for(delta["stop_reason"])))
        elif event == "message_stop":
            out.append(self._usage_chunk())
            self._done = True
        return out

    def finish(self) -> list[dict[str, Any]]:
        """At the end of the upstream stream: the usage chunk, if it was owed and never sent."""
        if self._done:
            return []
        self._done = True
        return [self._usage_chunk()] if self._finished else []

    def _block_start(self, index: int, block: dict[str, Any], out: list[dict[str, Any]]) -> None:
        kind = block.get("type")
        if kind == "text":
            self._blocks[index] = _Block("text")
            self._text(self._blocks[index], str(block.get("text") or ""), out)
        elif kind == "tool_use":
            tool = self._blocks[index] = _Block("tool", self._tools, block.get("input"))
            self._tools += 1
            function = {"name": block.get("name", ""), "arguments": ""}
            call = {"index": tool.tool, "id": block.get("id", ""), "type": "function", "function": function}
            out.append(self._chunk({"tool_calls": [call]}))
        else:
            self._blocks[index] = _Block("skip")  # thinking and server-tool blocks

    def _block_delta(self, index: int, delta: dict[str, Any], out: list[dict[str, Any]]) -> None:
        block = self._blocks.get(index)
        if block is None:
            raise InvalidInput(f"a delta for block {index}, which never started", field="index")
        if block.kind == "text" and delta.get("type") == "text_delta":
            self._text(block, str(delta.get("text") or ""), out)
        elif block.kind == "tool" and delta.get("type") == "input_json_delta":
            fragment = str(delta.get("partial_json") or "")
            if fragment:
                block.sent_arguments = True
                out.append(self._arguments(block.tool, fragment))

    def _block_stop(self, index: int, out: list[dict[str, Any]]) -> None:
        block = self._blocks.get(index)
        if block is not None and block.kind == "tool" and not block.sent_arguments:
            # no input_json_delta came: the input (usually {}) was whole in the start event
            start = block.start_input if block.start_input is not None else {}
            out.append(self._arguments(block.tool, compact_json(start)))
            block.sent_arguments = True

    def _text(self, block: _Block, text: str, out: list[dict[str, Any]]) -> None:
        if not text:
            return
        if self._wrote_text and not block.sent_text:
            text = TEXT_JOIN + text  # the same separator the non-streaming translation uses
        block.sent_text = self._wrote_text = True
        out.append(self._chunk({"content": text}))

    def _arguments(self, tool: int, fragment: str) -> dict[str, Any]:
        return self._chunk({"tool_calls": [{"index": tool, "function": {"arguments": fragment}}]})

    def _merge_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self._usage.update({k: v for k, v in usage.items() if v is not None})

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**self._head(), "choices": [choice]}

    def _usage_chunk(self) -> dict[str, Any]:
        return {**self._head(), "choices": [], "usage": usage_to_openai(self._usage)}

    def _head(self) -> dict[str, Any]:
        return {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
        }


_ANTHROPIC_EVENTS = {
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
}


class OpenAIToAnthropicStream:
    """``chat.completion.chunk`` dicts in, Messages stream ``(event, data)`` pairs out.

    Only choice 0 is relayed (Anthropic has one).  The end (message_delta, message_stop) is
    held back after finish_reason until usage arrives, since OpenAI sends usage last.
    """

    def __init__(self, model: str) -> None:
        self._model = model
        self._id = ""
        self._started = False
        self._next_index = 0
        self._open: int | None = None
        self._open_text = False
        self._tool_blocks: dict[int, int] = {}
        self._tool_ids: dict[int, str] = {}
        self._stop_reason: str | None = None
        self._usage: dict[str, Any] | None = None
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, chunk: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        chunk = expect_object(chunk, "chunk")
        if chunk.get("error"):  # some OpenAI-compatible servers report failures in-stream
            raise _upstream_error(chunk["error"])
        if self._done:
            return []
        out: list[tuple[str, dict[str, Any]]] = []
        self._start(str(chunk.get("id") or ""), out)
        for i, choice in enumerate(expect_array(chunk.get("choices") or [], "choices")):
            choice = expect_object(choice, f"choices[{i}]")
            if choice.get("index", 0) != 0:
                continue
            delta = expect_object(choice.get("delta") or {}, f"choices[{i}].delta")
            text = "".join(delta[k] for k in ("content", "refusal") if isinstance(delta.get(k), str))
            if text:
                self._text(text, out)
            calls = expect_array(delta.get("tool_calls") or [], f"choices[{i}].delta.tool_calls")
            for j, call in enumerate(calls):
                self._tool(expect_object(call, f"choices[{i}].delta.tool_calls[{j}]"), out)
            if choice.get("finish_reason"):
                self._close(out)
                self._stop_reason = stop_reason_for(choice["finish_reason"])
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
            if self._stop_reason is not None:
                self._end(out)
        return out

    def finish(self) -> list[tuple[str, dict[str, Any]]]:
        """At ``[DONE]`` (or the end of the body): close what is open and end the message."""
        if self._done:
            return []
        out: list[tuple[str, dict[str, Any]]] = []
        self._start("", out)
        self._close(out)
        if self._stop_reason is None:  # a server that never sent finish_reason
            self._stop_reason = "tool_use" if self._tool_blocks else "end_turn"
        self._end(out)
        return out

    def _start(self, chunk_id: str, out: list[tuple[str, dict[str, Any]]]) -> None:
        if self._started:
            return
        self._started = True
        self._id = f"msg_{chunk_id or 'reef'}"
        message: dict[str, Any] = {
            "id": self._id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        out.append(("message_start", {"type": "message_start", "message": message}))

    def _text(self, text: str, out: list[tuple[str, dict[str, Any]]]) -> None:
        if self._open is None or not self._open_text:
            self._open_block({"type": "text", "text": ""}, out)
            self._open_text = True
        delta = {"type": "text_delta", "text": text}
        out.append(
            ("content_block_delta", {"type": "content_block_delta", "index": self._open, "delta": delta})
        )

    def _tool(self, call: dict[str, Any], out: list[tuple[str, dict[str, Any]]]) -> None:
        tool = call["index"] if "index" in call else guess_tool_index(self._tool_ids, call.get("id"))
        function: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else {}
        if tool not in self._tool_blocks:
            call_id = call.get("id") or fallback_tool_id(self._id, len(self._tool_blocks))
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": call_id,
                "name": function.get("name") or "",
                "input": {},
            }
            self._tool_blocks[tool] = self._open_block(block, out)
            self._tool_ids[tool] = call_id
            self._open_text = False
        fragment = function.get("arguments")
        if isinstance(fragment, str) and fragment:
            index = self._tool_blocks[tool]
            if index != self._open:
                # Anthropic blocks cannot reopen; OpenAI sends each call's arguments in one run
                raise InvalidInput(f"arguments for tool call {tool} after it ended", field="tool_calls")
            delta = {"type": "input_json_delta", "partial_json": fragment}
            out.append(
                ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            )

    def _open_block(self, block: dict[str, Any], out: list[tuple[str, dict[str, Any]]]) -> int:
        self._close(out)
        index = self._open = self._next_index
        self._next_index += 1
        out.append(
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})
        )
        return index

    def _close(self, out: list[tuple[str, dict[str, Any]]]) -> None:
        if self._open is not None:
            out.append(("content_block_stop", {"type": "content_block_stop", "index": self._open}))
            self._open = None

    def _end(self, out: list[tuple[str, dict[str, Any]]]) -> None:
        usage = usage_to_anthropic(self._usage) if self._usage is not None else {"output_tokens": 0}
        delta = {"stop_reason": self._stop_reason, "stop_sequence": None}
        out.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
        out.append(("message_stop", {"type": "message_stop"}))
        self._done = True


def _stream_index(data: dict[str, Any]) -> int:
    index = data.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise InvalidInput("index must be a non-negative integer", field="index")
    return index


def _upstream_error(error: Any) -> UpstreamStreamError:
    if not isinstance(error, dict):
        error = {"message": str(error)}
    message = str(error.get("message") or "the upstream stream failed")
    return UpstreamStreamError(message, error_type=str(error.get("type") or "api_error"))
