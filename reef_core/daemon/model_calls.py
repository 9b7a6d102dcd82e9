"""The served model, lent to recipes: a synchronous chat call through reef's upstream client.

Recipes run on worker threads; each call is handed to the daemon's event loop, sent in the
upstream's own format (translated from a Chat Completions request when the upstream speaks
Anthropic), and never recorded: a proposer's or reviewer's conversation is not an exchange
of the agent's.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from reef_core.daemon.context import Daemon
from reef_core.errors import UpstreamUnavailable
from reef_core.wire import translate

__all__ = ["UpstreamModel"]

_PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}


class UpstreamModel:
    """A :class:`~reef_core.learning.model.ModelCaller` over the daemon's upstream."""

    def __init__(self, daemon: Daemon, loop: asyncio.AbstractEventLoop) -> None:
        self.daemon = daemon  # read per call: the embedded engine may replace the upstream at startup
        self.loop = loop
        self.model = daemon.settings.inference.upstream_model or "default"

    def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        system: str | None = None,
        max_tokens: int = 4096,
        timeout: float = 300.0,
    ) -> str:
        chat: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
        chat += [{"role": m["role"], "content": m["content"]} for m in messages]
        body: dict[str, Any] = {
            "model": self.model,
            "messages": chat,
            "max_tokens": max_tokens,
            "stream": False,
        }
        upstream_format = self.daemon.upstream_format
        if upstream_format == "anthropic":
            body = translate.openai_request_to_anthropic(body)
        future = asyncio.run_coroutine_threadsafe(self._send(body, upstream_format), self.loop)
        try:
            answer = future.result(timeout)
        except TimeoutError as exc:
            future.cancel()
            raise UpstreamUnavailable(f"the served model did not answer within {timeout:.0f}s") from exc
        if upstream_format == "anthropic":
            answer = translate.anthropic_response_to_openai(answer, created=int(time.time()))
        try:
            content = answer["choices"][0]["message"].get("content")
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise UpstreamUnavailable("the served model's answer has no message") from exc
        return content if isinstance(content, str) else ""

    async def _send(self, body: dict[str, Any], upstream_format: str) -> Any:
        key = self.daemon.settings.inference.upstream_api_key
        headers = {"Content-Type": "application/json"}
        if upstream_format == "anthropic":
            headers["anthropic-version"] = "2023-06-01"
            if key:
                headers["x-api-key"] = key
        elif key:
            headers["Authorization"] = f"Bearer {key}"
        reply = await self.daemon.upstream.request(
            "POST", _PATHS[upstream_format], headers=headers, body=json.dumps(body).encode()
        )
        try:
            return json.loads(reply.body)
        except ValueError as exc:
            raise UpstreamUnavailable("the served model answered something that is not JSON") from exc
