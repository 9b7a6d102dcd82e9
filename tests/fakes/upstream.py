"""A scripted stand-in for hosted model endpoints: a real HTTP server speaking OpenAI and Anthropic.

``ScriptedUpstream`` runs an aiohttp server on 127.0.0.1 (ephemeral port) in a background thread
with its own event loop, so synchronous tests and the official sync SDKs can talk to it.  Tests
queue replies with :meth:`ScriptedUpstream.script`; each inference request (``/v1/chat/completions``,
``/v1/messages`` or ``/v1/responses``) consumes one, in order.  With the queue empty it asks
``responder`` (when a test set one) or answers ``default_text``.  ``/v1/responses`` (OpenAI's
Responses API) answers only while ``responses_api`` is true, else 404 as a chat-only server does;
``/v1/embeddings`` answers made-up vectors, ``embedding_dims`` long, without using the queue.

Streams are real SSE over chunked HTTP, each event written (and flushed) as it is produced, framed
exactly as the providers frame them.  Every request received is recorded in ``requests``.  Tools
are checked as the real servers check them: chat completions takes ``function`` tools alone, and
both name them in ``[a-zA-Z0-9_-]``; anything else is a 400, with nothing consumed.
"""

from __future__ import annotations

import array
import asyncio
import base64
import json
import math
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import pytest
from aiohttp import web

__all__ = [
    "Captured",
    "Delay",
    "Error",
    "Hang",
    "Reply",
    "Reset",
    "ScriptedUpstream",
    "Slow",
    "Text",
    "ToolCall",
    "free_port",
    "tool_results",
    "upstream",
    "upstream_fixture",
]

Route = Literal["openai", "anthropic", "responses"]

DEFAULT_MODEL = "scripted-model"
ARGUMENT_FRAGMENT = 7  # characters of tool-call arguments JSON per streamed fragment
_POLL = 0.02  # how often waiting handlers look for a stopping server or a departed client

# ----------------------------------------------------------------------------------------- replies


@dataclass(frozen=True)
class Text:
    """A normal answer.  ``stop`` is the OpenAI finish reason (mapped for Anthropic)."""

    text: str
    stop: str = "stop"
    usage: tuple[int, int] = (10, 5)  # (prompt/input tokens, completion/output tokens)
    #: the model's reasoning before it, as a reasoning server sends it on chat completions
    #: (``reasoning_content``; the other routes leave it out)
    reasoning: str | None = None


@dataclass(frozen=True)
class ToolCall:
    """The model calls one tool, optionally after some text."""

    name: str
    arguments: dict[str, Any]
    text: str | None = None
    call_id: str = "call_1"
    usage: tuple[int, int] = (10, 5)
    reasoning: str | None = None  # as :attr:`Text.reasoning`


@dataclass(frozen=True)
class Error:
    """An HTTP error carrying the route's own error envelope."""

    status: int
    message: str = "scripted error"
    type: str = "invalid_request_error"


@dataclass(frozen=True)
class Delay:
    """Wait ``seconds`` before answering with ``then``."""

    seconds: float
    then: Reply


@dataclass(frozen=True)
class Reset:
    """Streaming: send ``after_chunks`` SSE events of a Text reply, then abort the connection.

    A non-streaming request is aborted before any response byte is sent.
    """

    after_chunks: int = 2
    text: str = "this stream will be cut"


@dataclass(frozen=True)
class Hang:
    """Accept the request and never answer; the connection is aborted when the server stops."""


@dataclass(frozen=True)
class Slow:
    """Streaming with ``interval`` seconds between events, and ``first`` seconds between the
    headers and the first event (a model reading a long prompt).  Non-streaming: waits
    ``interval`` per word, then answers."""

    text: str
    interval: float
    first: float = 0.0


Reply = Text | ToolCall | Error | Delay | Reset | Hang | Slow


@dataclass(frozen=True)
class Captured:
    """One request as the server received it."""

    method: str
    path: str
    query: str  # the raw query string, without the "?"
    headers: dict[str, str]  # lower-cased names; repeated headers joined with ", "
    body: dict[str, Any] | None  # parsed JSON object; None when the body is not a JSON object
    raw: bytes


# ----------------------------------------------------------------------------------------- helpers


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _words(text: str) -> list[str]:
    """Split into word pieces that keep their trailing whitespace: joining gives ``text`` back."""
    if not text:
        return []
    return [piece for piece in re.split(r"(?<=\s)(?=\S)", text) if piece]


def _fragments(arguments_json: str) -> list[str]:
    return [
        arguments_json[i : i + ARGUMENT_FRAGMENT] for i in range(0, len(arguments_json), ARGUMENT_FRAGMENT)
    ] or [""]


_TO_ANTHROPIC_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
_TO_OPENAI_STOP = {v: k for k, v in _TO_ANTHROPIC_STOP.items()}


def _openai_error(status: int, message: str, type_: str) -> web.Response:
    body = {"error": {"message": message, "type": type_, "param": None, "code": None}}
    return web.Response(status=status, text=_dumps(body), content_type="application/json")


def _anthropic_error(status: int, message: str, type_: str) -> web.Response:
    body = {"type": "error", "error": {"type": type_, "message": message}}
    return web.Response(status=status, text=_dumps(body), content_type="application/json")


def _error(route: Route, status: int, message: str, type_: str) -> web.Response:
    return (_anthropic_error if route == "anthropic" else _openai_error)(status, message, type_)


_TOOL_NAME = {"openai": re.compile(r"[a-zA-Z0-9_-]{1,64}"), "anthropic": re.compile(r"[a-zA-Z0-9_-]{1,128}")}


def tool_results(path: str, body: dict[str, Any]) -> list[str]:
    """The tool results a request to ``path`` carries, in that API's own format, each as JSON
    text: ``function_call_output`` items (Responses), ``tool`` messages (chat completions) or
    ``tool_result`` blocks (Messages)."""
    if path.endswith("/responses"):
        items = body.get("input") if isinstance(body.get("input"), list) else []
        return [
            _dumps(i.get("output"))
            for i in items
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    if path.endswith("/chat/completions"):
        return [_dumps(m.get("content")) for m in messages if m.get("role") == "tool"]
    blocks = [b for m in messages if isinstance(m.get("content"), list) for b in m["content"]]
    return [
        _dumps(b.get("content")) for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"
    ]


def _tools_problem(route: Route, body: dict[str, Any]) -> str | None:
    """What a real server of ``route`` would refuse in the request's ``tools``, as it says it:
    chat completions takes function tools alone, both name them in ``[a-zA-Z0-9_-]``."""
    tools = body.get("tools")
    if route == "responses" or not isinstance(tools, list):
        return None
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            return f"Invalid 'tools[{i}]': expected an object."
        if route == "openai":
            if tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
                return f"Invalid value for 'tools[{i}].type': {tool.get('type')!r}; supported: 'function'."
            name = tool["function"].get("name")
        else:
            if tool.get("type", "custom") == "custom" and not isinstance(tool.get("input_schema"), dict):
                return f"tools.{i}.custom.input_schema: Field required"
            name = tool.get("name")
        if not isinstance(name, str) or not _TOOL_NAME[route].fullmatch(name):
            return f"Invalid 'tools[{i}]' name {name!r}: it must match ^[a-zA-Z0-9_-]+$."
    return None


@dataclass(frozen=True)
class _Answer:
    """What the model says, independent of the wire format."""

    text: str | None
    tool: ToolCall | None
    stop: str  # OpenAI vocabulary
    usage: tuple[int, int]
    reasoning: str | None = None


def _answer_of(reply: Text | ToolCall | Slow | Reset) -> _Answer:
    if isinstance(reply, ToolCall):
        return _Answer(reply.text, reply, "tool_calls", reply.usage, reply.reasoning)
    if isinstance(reply, Text):
        return _Answer(reply.text, None, reply.stop, reply.usage, reply.reasoning)
    return _Answer(reply.text, None, "stop", (10, 5))


# ---------------------------------------------------------------------------------- OpenAI format


def _openai_usage(usage: tuple[int, int]) -> dict[str, int]:
    prompt, completion = usage
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _openai_message(answer: _Answer, ident: str, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.text, "refusal": None}
    if answer.reasoning:
        message["reasoning_content"] = answer.reasoning
    if answer.tool is not None:
        message["tool_calls"] = [
            {
                "id": answer.tool.call_id,
                "type": "function",
                "function": {"name": answer.tool.name, "arguments": _dumps(answer.tool.arguments)},
            }
        ]
    return {
        "id": ident,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": answer.stop}],
        "usage": _openai_usage(answer.usage),
        "system_fingerprint": None,
    }


def _openai_events(answer: _Answer, ident: str, model: str, include_usage: bool) -> list[bytes]:
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        obj: dict[str, Any] = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            obj["usage"] = None
        return f"data: {_dumps(obj)}\n\n".encode()

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"reasoning_content": word}) for word in _words(answer.reasoning or "")]
    events += [chunk({"content": word}) for word in _words(answer.text or "")]
    if answer.tool is not None:
        for i, fragment in enumerate(_fragments(_dumps(answer.tool.arguments))):
            call: dict[str, Any] = {"index": 0, "function": {"arguments": fragment}}
            if i == 0:
                call = {
                    "index": 0,
                    "id": answer.tool.call_id,
                    "type": "function",
                    "function": {"name": answer.tool.name, "arguments": fragment},
                }
            events.append(chunk({"tool_calls": [call]}))
    events.append(chunk({}, answer.stop))
    if include_usage:
        obj = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": None,
            "choices": [],
            "usage": _openai_usage(answer.usage),
        }
        events.append(f"data: {_dumps(obj)}\n\n".encode())
    events.append(b"data: [DONE]\n\n")
    return events


# ---------------------------------------------------------------------------- OpenAI Responses API


def _responses_output(answer: _Answer, ident: str) -> list[dict[str, Any]]:
    output: list[dict[str, Any]] = []
    if answer.text:
        part = {"type": "output_text", "text": answer.text, "annotations": [], "logprobs": []}
        output.append(
            {
                "type": "message",
                "id": f"msg_{ident}",
                "role": "assistant",
                "status": "completed",
                "content": [part],
            }
        )
    if answer.tool is not None:
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{ident}",
                "call_id": answer.tool.call_id,
                "name": answer.tool.name,
                "arguments": _dumps(answer.tool.arguments),
                "status": "completed",
            }
        )
    return output


def _responses_object(
    answer: _Answer | None, ident: str, model: str, body: dict[str, Any], status: str = "completed"
) -> dict[str, Any]:
    usage = None
    if answer is not None and status != "in_progress":
        prompt, completion = answer.usage
        usage = {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion,
        }
    incomplete = answer is not None and answer.stop == "length" and status != "in_progress"
    return {
        "id": ident,
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if incomplete else status,
        "model": model,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": body.get("instructions"),
        "metadata": {},
        "parallel_tool_calls": True,
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "output": _responses_output(answer, ident) if answer is not None and status != "in_progress" else [],
        "usage": usage,
    }


def _responses_events(answer: _Answer, ident: str, model: str, body: dict[str, Any]) -> list[bytes]:
    frames: list[bytes] = []

    def event(kind: str, **fields: Any) -> None:
        data = {"type": kind, "sequence_number": len(frames), **fields}
        frames.append(f"event: {kind}\ndata: {_dumps(data)}\n\n".encode())

    event("response.created", response=_responses_object(answer, ident, model, body, "in_progress"))
    event("response.in_progress", response=_responses_object(answer, ident, model, body, "in_progress"))
    final = _responses_object(answer, ident, model, body)
    for index, item in enumerate(final["output"]):
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            event(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "content": []},
            )
            empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            event("response.content_part.added", **where, content_index=0, part=empty)
            for word in _words(answer.text or ""):
                event("response.output_text.delta", **where, content_index=0, delta=word, logprobs=[])
            event("response.output_text.done", **where, content_index=0, text=answer.text, logprobs=[])
            event("response.content_part.done", **where, content_index=0, part=item["content"][0])
        else:
            event(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            for fragment in _fragments(item["arguments"]):
                event("response.function_call_arguments.delta", **where, delta=fragment)
            event("response.function_call_arguments.done", **where, arguments=item["arguments"])
        event("response.output_item.done", output_index=index, item=item)
    event(f"response.{final['status']}", response=final)
    return frames


# ------------------------------------------------------------------------------- Anthropic format


def _anthropic_stop(stop: str) -> str:
    return _TO_ANTHROPIC_STOP.get(stop, stop)


def _anthropic_message(answer: _Answer, ident: str, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if answer.text:
        content.append({"type": "text", "text": answer.text})
    if answer.tool is not None:
        content.append(
            {
                "type": "tool_use",
                "id": answer.tool.call_id,
                "name": answer.tool.name,
                "input": answer.tool.arguments,
            }
        )
    prompt, completion = answer.usage
    return {
        "id": ident,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _anthropic_stop(answer.stop),
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": completion},
    }


def _anthropic_events(answer: _Answer, ident: str, model: str) -> list[bytes]:
    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {_dumps(data)}\n\n".encode()

    prompt, completion = answer.usage
    start = {
        "id": ident,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": 1},
    }
    events = [event("message_start", {"type": "message_start", "message": start})]
    index = 0
    pinged = False

    def block_start(block: dict[str, Any]) -> None:
        nonlocal pinged
        events.append(
            event(
                "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
            )
        )
        if not pinged:
            events.append(event("ping", {"type": "ping"}))
            pinged = True

    def delta(body: dict[str, Any]) -> None:
        events.append(
            event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": body})
        )

    def block_stop() -> None:
        events.append(event("content_block_stop", {"type": "content_block_stop", "index": index}))

    if answer.text or answer.tool is None:
        block_start({"type": "text", "text": ""})
        for word in _words(answer.text or ""):
            delta({"type": "text_delta", "text": word})
        block_stop()
        index += 1
    if answer.tool is not None:
        block_start({"type": "tool_use", "id": answer.tool.call_id, "name": answer.tool.name, "input": {}})
        for fragment in _fragments(_dumps(answer.tool.arguments)):
            delta({"type": "input_json_delta", "partial_json": fragment})
        block_stop()
    events.append(
        event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": _anthropic_stop(answer.stop), "stop_sequence": None},
                "usage": {"output_tokens": completion},
            },
        )
    )
    events.append(event("message_stop", {"type": "message_stop"}))
    return events


# ------------------------------------------------------------------------------------------ server

_MODELS_OPENAI = {
    "object": "list",
    "data": [{"id": DEFAULT_MODEL, "object": "model", "created": 0, "owned_by": "tests"}],
}
_MODELS_ANTHROPIC = {
    "data": [
        {
            "type": "model",
            "id": DEFAULT_MODEL,
            "display_name": "Scripted",
            "created_at": "2025-01-01T00:00:00Z",
        }
    ],
    "has_more": False,
    "first_id": DEFAULT_MODEL,
    "last_id": DEFAULT_MODEL,
}


class ScriptedUpstream:
    """A real HTTP server on 127.0.0.1 answering OpenAI and Anthropic requests from a script."""

    default_text: str = "Hello from the scripted upstream."

    def __init__(self) -> None:
        self.url: str = ""
        #: whether ``/v1/responses`` exists here (False: 404, as on a chat-only server)
        self.responses_api: bool = True
        #: the length of the vectors ``/v1/embeddings`` answers with
        self.embedding_dims: int = 8
        self.requests: list[Captured] = []
        # Inference responses whose client went away before the answer was complete.
        self.disconnects: int = 0
        #: answers requests when the queue is empty: ``(route, body) -> Reply | None`` (None:
        #: ``default_text``); lets a test play a model that answers by what it is asked
        self.responder: Callable[[Route, dict[str, Any]], Reply | None] | None = None
        self._lock = threading.Lock()
        self._queue: deque[Reply] = deque()
        self._counter = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._stopping: asyncio.Event | None = None

    # ------------------------------------------------------------------------------ test-side API

    def script(self, *replies: Reply) -> None:
        """Queue replies; each inference request consumes one, in order."""
        with self._lock:
            self._queue.extend(replies)

    def reset(self) -> None:
        """Forget queued replies, captured requests, the disconnect count and the id counter."""
        with self._lock:
            self._queue.clear()
            self.requests.clear()
            self.disconnects = 0
            self._counter = 0

    @property
    def pending(self) -> int:
        """How many scripted replies are still queued."""
        with self._lock:
            return len(self._queue)

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[Captured]:
        """Block until at least ``count`` requests were captured; returns a snapshot of them."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if len(self.requests) >= count:
                    return list(self.requests)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{len(self.requests)} requests captured, wanted {count}")
            time.sleep(0.005)

    # --------------------------------------------------------------------------------- lifecycle

    def start(self) -> ScriptedUpstream:
        if self._thread is not None:
            raise RuntimeError("ScriptedUpstream already started")
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._startup())
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
                for task in pending:
                    task.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=serve, name="scripted-upstream", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("ScriptedUpstream did not start within 10 s")
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    def stop(self) -> None:
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            self._thread = None
            self._loop = None

    def __enter__(self) -> ScriptedUpstream:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def _startup(self) -> None:
        self._stopping = asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runner = runner
        port = runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"

    async def _shutdown(self) -> None:
        assert self._stopping is not None and self._runner is not None
        self._stopping.set()  # wakes Hang, Delay and Slow handlers, which abort their connections
        await self._runner.cleanup()

    # ---------------------------------------------------------------------------------- handlers

    def _next_reply(self, route: Route, body: dict[str, Any]) -> Reply:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
            responder = self.responder
        if responder is not None:
            reply = responder(route, body)
            if reply is not None:
                return reply
        return Text(self.default_text)

    def _next_id(self, route: Route) -> str:
        with self._lock:
            self._counter += 1
            n = self._counter
        return {"openai": f"chatcmpl-{n}", "anthropic": f"msg_{n}", "responses": f"resp_{n}"}[route]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body: dict[str, Any] | None = None
        parsed_ok = False
        if raw:
            try:
                parsed = json.loads(raw)
            except ValueError:
                pass
            else:
                parsed_ok = isinstance(parsed, dict)
                body = parsed if parsed_ok else None
        headers: dict[str, str] = {}
        for name, value in request.headers.items():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        with self._lock:
            self.requests.append(
                Captured(request.method, request.path, request.query_string, headers, body, raw)
            )

        path = request.path.rstrip("/")
        if path.startswith("/v1/"):
            path = path[3:]
        method = request.method
        if method == "GET" and path == "/models":
            shape = _MODELS_ANTHROPIC if "anthropic-version" in headers else _MODELS_OPENAI
            return web.json_response(shape)
        if method == "POST" and path == "/embeddings" and parsed_ok and body is not None:
            return web.json_response(self._embeddings(body))
        routes: dict[str, Route] = {
            "/chat/completions": "openai",
            "/messages": "anthropic",
            "/messages/count_tokens": "anthropic",
        }
        if self.responses_api:
            routes["/responses"] = "responses"
        route = routes.get(path)
        if route is None or method != "POST":
            guess: Route = route or ("anthropic" if "anthropic-version" in headers else "openai")
            status = 404 if route is None else 405
            return _error(guess, status, f"no route for {method} {request.path}", "not_found_error")
        if not parsed_ok or body is None:
            return _error(route, 400, "request body is not a JSON object", "invalid_request_error")
        if path == "/messages/count_tokens":
            return web.json_response({"input_tokens": 42})
        problem = _tools_problem(route, body)
        if problem is not None:
            return _error(route, 400, problem, "invalid_request_error")
        return await self._reply(request, route, body, self._next_reply(route, body))

    async def _reply(
        self, request: web.Request, route: Route, body: dict[str, Any], reply: Reply
    ) -> web.StreamResponse:
        stream = body.get("stream") is True
        model = str(body.get("model") or DEFAULT_MODEL)

        if isinstance(reply, Delay):
            if not await self._pause(request, reply.seconds):
                return self._drop(request)
            return await self._reply(request, route, body, reply.then)
        if isinstance(reply, Error):
            return _error(route, reply.status, reply.message, reply.type)
        if isinstance(reply, Hang):
            await self._pause(request, math.inf)
            return self._drop(request)

        answer = _answer_of(reply)
        ident = self._next_id(route)
        if not stream:
            if isinstance(reply, Reset):
                return self._drop(request)
            if isinstance(reply, Slow) and not await self._pause(
                request, reply.interval * max(1, len(_words(reply.text)))
            ):
                return self._drop(request)
            if route == "responses":
                message = _responses_object(answer, ident, model, body)
            else:
                message = (_openai_message if route == "openai" else _anthropic_message)(answer, ident, model)
            return web.json_response(message, headers=self._id_headers(route, ident))

        if route == "responses":
            events = _responses_events(answer, ident, model, body)
        elif route == "openai":
            options = body.get("stream_options")
            include_usage = isinstance(options, dict) and options.get("include_usage") is True
            events = _openai_events(answer, ident, model, include_usage)
        else:
            events = _anthropic_events(answer, ident, model)
        if isinstance(reply, Reset):
            events = events[: max(0, reply.after_chunks)]
        interval = reply.interval if isinstance(reply, Slow) else 0.0
        first = reply.first if isinstance(reply, Slow) else 0.0

        resp = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                **self._id_headers(route, ident),
            },
        )
        resp.enable_chunked_encoding()
        try:
            await resp.prepare(request)
            for i, data in enumerate(events):
                wait = interval if i else first
                if wait and not await self._pause(request, wait):
                    return self._drop(request, resp)
                await resp.write(data)
        except ConnectionError:
            self._note_disconnect()
            return resp
        if isinstance(reply, Reset):
            await self._abort_after_flush(request)
        return resp

    @staticmethod
    def _id_headers(route: Route, ident: str) -> dict[str, str]:
        return {"request-id": f"req_{ident}"} if route == "anthropic" else {"x-request-id": f"req_{ident}"}

    def _embeddings(self, body: dict[str, Any]) -> dict[str, Any]:
        """Made-up vectors: each input's is its length and character sum, spread out."""
        given = body.get("input")
        inputs = [given] if isinstance(given, str) else list(given or [])
        data = []
        for index, text in enumerate(inputs):
            seed = len(str(text)) + sum(map(ord, str(text)))
            vector = [round(math.sin(seed + k), 6) for k in range(self.embedding_dims)]
            embedding: list[float] | str = vector
            if body.get("encoding_format") == "base64":  # what the openai SDK asks for by default
                embedding = base64.b64encode(array.array("f", vector).tobytes()).decode()
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        tokens = sum(len(str(text).split()) for text in inputs)
        return {
            "object": "list",
            "data": data,
            "model": str(body.get("model") or "scripted-embedding"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    def _client_gone(self, request: web.Request) -> bool:
        transport = request.transport
        return transport is None or transport.is_closing()

    def _note_disconnect(self) -> None:
        with self._lock:
            self.disconnects += 1

    async def _pause(self, request: web.Request, seconds: float) -> bool:
        """Wait ``seconds``; False as soon as the server is stopping or the client has gone."""
        assert self._stopping is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while True:
            if self._stopping.is_set():
                return False
            if self._client_gone(request):
                self._note_disconnect()
                return False
            remaining = deadline - loop.time()
            if remaining <= 0:
                return True
            try:
                await asyncio.wait_for(self._stopping.wait(), min(remaining, _POLL))
            except TimeoutError:
                pass

    @staticmethod
    def _drop(request: web.Request, resp: web.StreamResponse | None = None) -> web.StreamResponse:
        """Abort the connection without finishing the response; aiohttp then ignores it quietly."""
        transport = request.transport
        if transport is not None:
            transport.abort()
        return resp if resp is not None else web.Response(status=500)

    async def _abort_after_flush(self, request: web.Request) -> None:
        """Let the events already written leave the process, then cut the connection."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 1.0
        transport = request.transport
        while transport is not None and transport.get_write_buffer_size() and loop.time() < deadline:
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.01)
        if transport is not None:
            transport.abort()


@pytest.fixture(name="upstream")
def upstream_fixture() -> Iterator[ScriptedUpstream]:
    """A started ScriptedUpstream, stopped after the test.  The fixture is named ``upstream``.

    Import either name into a test module or conftest (or list this module in ``pytest_plugins``);
    ``upstream_fixture`` avoids ruff's F811 on test parameters named ``upstream``.
    """
    with ScriptedUpstream() as server:
        yield server


upstream = upstream_fixture
