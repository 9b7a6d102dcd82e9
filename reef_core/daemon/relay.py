"""Relaying a streamed answer: event by event, in the client's format, receipt last.

The upstream's events are decoded as they arrive and each one is written to the client as
soon as it is complete; nothing is buffered beyond one event.  The terminal event (OpenAI's
``[DONE]``, Anthropic's ``message_stop``) is held back until the record is committed, so it
can carry the receipt.  When the upstream speaks the other format, a stream translator from
``reef_core.wire`` sits in between.  ``ResponsesRelay`` does the same for the Responses API:
the upstream's own Responses events passed through, or its chat (or Messages) stream
translated into them; the receipt rides on ``response.completed``/``response.incomplete``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from reef_core import jsonio
from reef_core.wire import anthropic as anthropic_wire
from reef_core.wire import openai as openai_wire
from reef_core.wire.responses_stream import (
    TERMINAL_EVENTS,
    ChatToResponsesStream,
    ResponsesStreamAssembler,
    with_response_receipt,
)
from reef_core.wire.sse import SSEEvent, encode_event
from reef_core.wire.streams import UpstreamStreamError
from reef_core.wire.translate import AnthropicToOpenAIStream, OpenAIToAnthropicStream

__all__ = ["Out", "ResponsesRelay", "StreamRelay", "make_relay"]


class Out(NamedTuple):
    """One event for the client: its SSE event name, data text, and the parsed data."""

    event: str | None
    text: str
    data: dict[str, Any]

    def encode(self) -> bytes:
        return encode_event(self.text, self.event)


def _out(event: str | None, data: dict[str, Any]) -> Out:
    return Out(event, jsonio.dumps(data).decode(), data)


@dataclass
class StreamRelay:
    """Turns upstream SSE events into client events; knows the client's terminal event."""

    client_format: str
    upstream_format: str
    model: str
    terminal_seen: bool = False
    _stop: dict[str, Any] | None = None  # Anthropic message_stop, held for the receipt
    _to_client: Any = None
    _assembler: Any = field(default=None)

    def __post_init__(self) -> None:
        if self.client_format == "openai":
            self._assembler = openai_wire.ChatStreamAssembler()
        else:
            self._assembler = anthropic_wire.MessageStreamAssembler()
        if self.client_format != self.upstream_format:
            if self.upstream_format == "anthropic":
                self._to_client = AnthropicToOpenAIStream(self.model)
            else:
                self._to_client = OpenAIToAnthropicStream(self.model)

    # -- upstream side ---------------------------------------------------------------------

    def feed(self, event: SSEEvent) -> list[Out]:
        """Client events for one upstream event (the terminal one is held back)."""
        if self.terminal_seen:
            return []
        if self.upstream_format == "openai" and event.data.strip() == "[DONE]":
            self.terminal_seen = True
            if self._to_client is not None:
                return self._client_events(self._to_client.finish())
            return []
        if not event.data.strip():
            return []
        data = jsonio.loads(event.data)
        if self._to_client is None:  # same format: pass the event through as sent
            if self.client_format == "anthropic" and event.event == "message_stop":
                self.terminal_seen = True
                self._stop = data
                self._assembler.feed("message_stop", data)
                return []
            out = Out(event.event, event.data, data)
            self._assemble(out)
            return [out]
        if self.upstream_format == "anthropic":
            chunks = self._to_client.feed(event.event or "", data)
            if event.event == "message_stop":
                self.terminal_seen = True
            return self._client_events(chunks)
        return self._client_events(self._to_client.feed(data))

    def _client_events(self, produced: list[Any]) -> list[Out]:
        outs = []
        for item in produced:
            if self.client_format == "openai":
                out = _out(None, item)
            else:
                name, data = item
                if name == "message_stop":
                    self.terminal_seen = True
                    self._stop = data
                    self._assembler.feed("message_stop", data)
                    continue
                out = _out(name, data)
            self._assemble(out)
            outs.append(out)
        return outs

    def _assemble(self, out: Out) -> None:
        if self.client_format == "openai":
            if "error" not in out.data:
                self._assembler.feed(out.data)
        else:
            self._assembler.feed(out.event or "", out.data)

    # -- client side -----------------------------------------------------------------------

    @property
    def complete(self) -> bool:
        if self.client_format == "anthropic":
            return self._stop is not None
        return self.terminal_seen

    def assembled(self) -> dict[str, Any]:
        return self._assembler.result()

    def terminal(self, receipt: str | None) -> bytes:
        """The closing event(s), carrying the receipt when there is one."""
        if self.client_format == "openai":
            closing = b""
            if receipt is not None:
                closing = _out(None, openai_wire.receipt_chunk(self._template(), receipt)).encode()
            return closing + encode_event("[DONE]")
        stop = self._stop or {"type": "message_stop"}
        if receipt is not None:
            stop = anthropic_wire.with_receipt(stop, receipt)
        return _out("message_stop", stop).encode()

    def error_event(self, message: str, receipt: str | None) -> bytes:
        """An in-band error for a stream that broke after it started."""
        if self.client_format == "openai":
            data: dict[str, Any] = openai_wire.error_body(message, "upstream_error")
        else:
            data = anthropic_wire.error_body(message, "api_error")
        if receipt is not None:
            data["reef"] = {"agent_record_id": receipt}
        return _out("error" if self.client_format == "anthropic" else None, data).encode()

    def _template(self) -> dict[str, Any] | None:
        try:
            result = self._assembler.result()
        except Exception:  # an empty stream has nothing to copy the id from
            return None
        return result if isinstance(result, dict) else None


def make_relay(client_format: str, upstream_format: str, model: str) -> StreamRelay:
    return StreamRelay(client_format=client_format, upstream_format=upstream_format, model=model)


class ResponsesRelay:
    """A ``/v1/responses`` stream: the upstream's Responses events as sent (``upstream_format``
    ``responses``), or its chat chunks (``openai``) or Messages events (``anthropic``) translated
    into them.  The terminal event is held back for the receipt; ``response.failed`` or an
    ``error`` event from the upstream ends the stream as a failure."""

    def __init__(
        self, upstream_format: str, request: dict[str, Any], *, response_id: str, created_at: int
    ) -> None:
        self.upstream_format = upstream_format
        self.terminal_seen = False
        self._held: dict[str, Any] | None = None
        self._assembler = ResponsesStreamAssembler()
        self._from_chat: ChatToResponsesStream | None = None
        self._from_anthropic: AnthropicToOpenAIStream | None = None
        if upstream_format != "responses":
            self._from_chat = ChatToResponsesStream(request, response_id=response_id, created_at=created_at)
        if upstream_format == "anthropic":
            self._from_anthropic = AnthropicToOpenAIStream(str(request.get("model") or ""), created_at)

    def feed(self, event: SSEEvent) -> list[Out]:
        """Client events for one upstream event (the terminal one is held back)."""
        if self.terminal_seen:
            return []
        text = event.data.strip()
        if text == "[DONE]":
            if self._from_chat is None:
                return []  # a Responses stream has none, but a server may add one: the end is its own
            return self._client_events(self._from_chat.finish(int(time.time())))
        if not text:
            return []
        data = jsonio.loads(event.data)
        if self._from_chat is None:
            return self._passed(event, data)
        if self._from_anthropic is not None:
            chunks = self._from_anthropic.feed(event.event or "", data)
            produced = [e for chunk in chunks for e in self._from_chat.feed(chunk)]
            if self._from_anthropic.done:
                produced += self._from_chat.finish(int(time.time()))
            return self._client_events(produced)
        return self._client_events(self._from_chat.feed(data))

    def _passed(self, event: SSEEvent, data: Any) -> list[Out]:
        if not isinstance(data, dict):
            raise ValueError("a Responses stream event must be a JSON object")
        kind = data.get("type")
        if kind == "error":
            message = str(data.get("message") or "the upstream stream failed")
            raise UpstreamStreamError(message)
        self._assembler.feed(data)
        if kind in TERMINAL_EVENTS:
            self._hold(data)
            return []
        return [Out(event.event, event.data, data)]

    def _client_events(self, produced: list[tuple[str, dict[str, Any]]]) -> list[Out]:
        outs = []
        for name, data in produced:
            self._assembler.feed(data)
            if name in TERMINAL_EVENTS:
                self._hold(data)
            else:
                outs.append(_out(name, data))
        return outs

    def _hold(self, data: dict[str, Any]) -> None:
        self.terminal_seen = True
        self._held = data
        if data.get("type") == "response.failed":
            error = data["response"].get("error") if isinstance(data.get("response"), dict) else None
            message = error.get("message") if isinstance(error, dict) else None
            raise UpstreamStreamError(str(message or "the upstream's response failed"))

    @property
    def complete(self) -> bool:
        return self._held is not None and self._held.get("type") != "response.failed"

    def assembled(self) -> dict[str, Any]:
        return self._assembler.result()

    def terminal(self, receipt: str | None) -> bytes:
        """The held terminal event, carrying the receipt when there is one."""
        data = self._held or self._assembler.failure("the stream ended without its final event")[1]
        if receipt is not None:
            data = with_response_receipt(data, receipt)
        return _out(str(data.get("type")), data).encode()

    def error_event(self, message: str, receipt: str | None) -> bytes:
        """``response.failed`` (the upstream's own, if it sent one) or an ``error`` event."""
        if self._held is not None and self._held.get("type") == "response.failed":
            name, data = "response.failed", self._held
        else:
            name, data = self._assembler.failure(message)
        if receipt is not None:
            data = with_response_receipt(data, receipt)
        return _out(name, data).encode()
