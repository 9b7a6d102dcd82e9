"""The served model, lent to recipes: a synchronous chat call through reef's upstream client.

Recipes run on worker threads; each call is handed to the daemon's event loop, sent in the
upstream's own format (translated from a Chat Completions request when the upstream speaks
Anthropic), and never recorded: a proposer's or reviewer's conversation is not an exchange
of the agent's.

Structured output (``schema``) is asked for in each format's own way: an OpenAI upstream gets
``response_format`` with the JSON schema (not strict: strict mode refuses most real schemas);
an Anthropic one, which has no such field, gets one forced tool whose input schema is the
schema, and the tool call's input is the answer. An upstream that answers 400 to a schema is
asked once more without it, and if that succeeds it is never sent a schema again (remembered
per URL and format on this object, which lives as long as the daemon): the recipe then gets
whatever text the model wrote and parses it as it would any prompt-and-parse answer. A 400
that the plain request also earns is the request's fault, not the schema's: it is raised and
nothing is remembered.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from reef_core.daemon.context import Daemon
from reef_core.errors import UpstreamRejected, UpstreamUnavailable
from reef_core.learning.model import ModelCall, ModelCaller
from reef_core.upstream.client import origin
from reef_core.wire import translate

__all__ = ["UpstreamModel"]

log = logging.getLogger(__name__)

_PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}
_TOOL_DESCRIPTION = "Answer with this tool."


class UpstreamModel(ModelCaller):
    """A :class:`~reef_core.learning.model.ModelCaller` over the daemon's upstream."""

    def __init__(self, daemon: Daemon, loop: asyncio.AbstractEventLoop) -> None:
        self.daemon = daemon  # read per call: the embedded engine may replace the upstream at startup
        self.loop = loop
        self.model = daemon.settings.inference.upstream_model or "default"
        #: (upstream URL, format) pairs that refused a schema; only ever grows
        self.schemas_refused: set[tuple[str, str]] = set()

    def answer(self, call: ModelCall) -> str:
        upstream_format = self.daemon.upstream_format
        url = self.daemon.upstream.base_url
        upstream = (str(url), upstream_format)
        schema = None if upstream in self.schemas_refused else call.schema
        timeout = call.timeout
        chat: list[dict[str, str]] = [{"role": "system", "content": call.system}] if call.system else []
        chat += [{"role": m["role"], "content": m["content"]} for m in call.messages]
        body: dict[str, Any] = {
            "model": self.model,
            "messages": chat,
            "max_tokens": call.max_tokens,
            "stream": False,
        }
        if upstream_format == "anthropic":
            body = translate.openai_request_to_anthropic(body)
        deadline = time.monotonic() + timeout
        if schema is None:
            answer = self._call(body, upstream_format, deadline, timeout)
        else:
            try:
                answer = self._call(
                    _with_schema(body, schema, upstream_format), upstream_format, deadline, timeout
                )
            except UpstreamRejected as exc:
                if exc.status != 400:
                    raise
                answer = self._call(body, upstream_format, deadline, timeout)
                self.schemas_refused.add(upstream)
                log.info(
                    "upstream %s (%s) refused a response schema (400): recipes' calls to it go without one",
                    origin(url) if url and "://" in url else url,
                    upstream_format,
                )
                schema = None
        if upstream_format == "anthropic":
            if schema is not None:
                tool_input = _tool_input(answer)
                if tool_input is not None:
                    return tool_input
            answer = translate.anthropic_response_to_openai(answer, created=int(time.time()))
        try:
            content = answer["choices"][0]["message"].get("content")
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise UpstreamUnavailable("the served model's answer has no message") from exc
        return content if isinstance(content, str) else ""

    def _call(self, body: dict[str, Any], upstream_format: str, deadline: float, timeout: float) -> Any:
        """Send on the daemon's loop and wait, at most until ``deadline``, for the parsed answer."""
        future = asyncio.run_coroutine_threadsafe(self._send(body, upstream_format), self.loop)
        try:
            return future.result(max(0.0, deadline - time.monotonic()))
        except TimeoutError as exc:
            future.cancel()
            raise UpstreamUnavailable(f"the served model did not answer within {timeout:.0f}s") from exc

    async def _send(self, body: dict[str, Any], upstream_format: str) -> Any:
        key = self.daemon.settings.inference.upstream_api_key
        headers = {"Content-Type": "application/json"}
        if upstream_format == "anthropic":
            headers["anthropic-version"] = "2023-06-01"
            if key:
                headers["x-api-key"] = key
        elif key:
            headers["Authorization"] = f"Bearer {key}"
        headers.update(self.daemon.settings.inference.upstream_headers)
        reply = await self.daemon.upstream.request(
            "POST", _PATHS[upstream_format], headers=headers, body=json.dumps(body).encode()
        )
        try:
            return json.loads(reply.body)
        except ValueError as exc:
            raise UpstreamUnavailable("the served model answered something that is not JSON") from exc


def _with_schema(body: dict[str, Any], schema: dict[str, Any], upstream_format: str) -> dict[str, Any]:
    """``body`` (already in the upstream's format) asking for an answer shaped by ``schema``."""
    name, json_schema = schema["name"], schema["schema"]
    if upstream_format == "anthropic":
        return {
            **body,
            "tools": [{"name": name, "description": _TOOL_DESCRIPTION, "input_schema": json_schema}],
            "tool_choice": {"type": "tool", "name": name},
        }
    return {
        **body,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": name, "schema": json_schema, "strict": False},
        },
    }


def _tool_input(answer: Any) -> str | None:
    """The first ``tool_use`` block's input of a Messages answer, as JSON; None without one."""
    content = answer.get("content") if isinstance(answer, dict) else None
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") == "tool_use" and "input" in block:
            return json.dumps(block["input"])
    return None
