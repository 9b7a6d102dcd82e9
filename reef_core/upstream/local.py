"""The embedded model (``builtin:tiny``) served in-process, as an OpenAI-compatible upstream.

The daemon talks to it exactly as to an HTTP upstream (``request`` / ``stream`` return the
same reply types), so translation, relaying and recording need no special case.  What it
adds is what only a local engine knows: the token ids, their log-probs and the weight
version of every answer (``extras``), which the record keeps for training.

Each scenario can be served its own weights (its current release); a scenario without
releases gets the pretrained base.  Generation runs on one worker thread, off the event
loop; a swap replaces a scenario's weights under the same lock, so it waits for the answer
in flight and the next one uses the new weights.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import threading
import time
from collections.abc import AsyncIterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from reef_core.errors import InvalidInput, UpstreamRejected
from reef_core.models.tiny import TinyLM, checkpoint, decode, prompt_ids
from reef_core.upstream.client import UpstreamReply
from reef_core.upstream.seam import local_route

__all__ = ["BUILTIN_TINY", "LocalEngine", "LocalStream"]

BUILTIN_TINY = "builtin:tiny"
_MAX_NEW_TOKENS = 256
_DEFAULT_NEW_TOKENS = 64
_NEWLINE = 10


class _Served:
    """One scenario's live weights and their version."""

    def __init__(self, model: TinyLM, version: int) -> None:
        self.model = model
        self.version = version
        self.lock = threading.Lock()


class LocalStream:
    """A finished local answer, replayed as OpenAI SSE chunks (one per token)."""

    status = 200

    def __init__(self, events: list[bytes], extras: dict[str, Any]) -> None:
        self._events = events
        self.extras = extras

    async def chunks(self) -> AsyncIterator[bytes]:
        for event in self._events:
            yield event

    def close(self) -> None:
        pass


class LocalEngine:
    """Implements :class:`~reef_core.upstream.seam.Answerer`."""

    base_url: str | None = BUILTIN_TINY
    configured = True

    def __init__(self, base_checkpoint: Path, *, model_name: str = BUILTIN_TINY) -> None:
        self.base_checkpoint = base_checkpoint
        self.model_name = model_name
        self._base_state: dict[str, torch.Tensor] | None = None
        self._served: dict[str, _Served] = {}
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reef-tiny")
        self._counter = 0

    # -- weights -----------------------------------------------------------------------------

    def base_model(self) -> TinyLM:
        """A fresh copy of the pretrained base model."""
        model = checkpoint.load(self.base_checkpoint)
        if self._base_state is None:
            self._base_state = {k: v.clone() for k, v in model.state_dict().items()}
        return model

    def _for(self, scenario: str | None) -> _Served:
        key = scenario or ""
        with self._lock:
            served = self._served.get(key)
            if served is None:
                served = _Served(self.base_model(), 0)
                self._served[key] = served
            return served

    def version(self, scenario: str | None) -> int:
        return self._for(scenario).version

    def snapshot(self, scenario: str | None) -> tuple[TinyLM, int]:
        """A private copy of what ``scenario`` is served now (for a trainer to start from)."""
        served = self._for(scenario)
        with served.lock:
            model = self.base_model()
            model.load_state_dict(served.model.state_dict())
            return model, served.version

    def swap(self, scenario: str, state: Mapping[str, torch.Tensor], version: int) -> float:
        """Serve ``state`` to ``scenario`` from the next answer on; returns the seconds it took
        (including the wait for the answer in flight)."""
        started = time.perf_counter()
        served = self._for(scenario)
        with served.lock:
            served.model.load_state_dict(dict(state))
            served.version = version
        return time.perf_counter() - started

    # -- the upstream surface ----------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str],
        body: bytes | None = None,
        query: str = "",
        scenario: str | None = None,
    ) -> UpstreamReply:
        other = local_route(method, path, self.model_name, "the embedded model")
        if other is not None:
            return other
        request = _parse(body)
        answer, extras = await self._answer(request, scenario)
        return UpstreamReply(200, "application/json", json.dumps(answer).encode(), extras)

    async def stream(
        self,
        path: str,
        *,
        headers: Mapping[str, str],
        body: bytes,
        query: str = "",
        scenario: str | None = None,
    ) -> LocalStream:
        if path != "/v1/chat/completions":
            raise UpstreamRejected(f"the embedded model does not serve {path}", status=404, body=b"{}")
        request = _parse(body)
        answer, extras = await self._answer(request, scenario)
        return LocalStream(_as_chunks(answer, extras, request), extras)

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _answer(
        self, request: dict[str, Any], scenario: str | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._generate, request, scenario)

    def _generate(
        self, request: dict[str, Any], scenario: str | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        served = self._for(scenario)
        max_new = request["max_tokens"]
        generator = None
        if request["seed"] is not None:
            generator = torch.Generator().manual_seed(request["seed"])
        with served.lock:
            context = served.model.config.max_len
            prompt = prompt_ids(request["messages"], context - max_new)
            (generation,) = served.model.generate(
                [prompt], max_new_tokens=max_new, temperature=request["temperature"], generator=generator
            )
            version = served.version
        tokens, logprobs, finish = (
            list(generation.tokens),
            list(generation.logprobs),
            generation.finish_reason,
        )
        if _NEWLINE in tokens:  # a reply is one line: past it the model starts writing the user's turn
            cut = tokens.index(_NEWLINE)
            tokens, logprobs, finish = tokens[:cut], logprobs[:cut], "stop"
        self._counter += 1
        text = decode(tokens)
        answer = {
            "id": f"chatcmpl-tiny-{self._counter}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request["model"] or self.model_name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish,
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(tokens),
                "total_tokens": len(prompt) + len(tokens),
            },
        }
        extras = {
            "engine": BUILTIN_TINY,
            "prompt_ids": prompt,
            "response_ids": tokens,
            "logprobs": [round(x, 6) for x in logprobs],
            "temperature": request["temperature"],
            "weight_version": version,
        }
        return answer, extras


def _parse(body: bytes | None) -> dict[str, Any]:
    try:
        data = json.loads(body or b"{}")
    except ValueError as exc:
        raise InvalidInput(f"the request body is not valid JSON: {exc}", field="body") from None
    max_tokens = data.get("max_completion_tokens", data.get("max_tokens", _DEFAULT_NEW_TOKENS))
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not 1 <= max_tokens:
        raise InvalidInput("max_tokens must be a positive whole number", field="max_tokens")
    temperature = data.get("temperature", 1.0)
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not 0.05 <= temperature <= 2
    ):
        raise InvalidInput("the embedded model samples at a temperature from 0.05 to 2", field="temperature")
    if data.get("n", 1) != 1:
        raise InvalidInput("the embedded model answers one choice per request (n=1)", field="n")
    seed = data.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise InvalidInput("seed must be a whole number", field="seed")
    options = data.get("stream_options") or {}
    return {
        "messages": data.get("messages") or [],
        "model": data.get("model") if isinstance(data.get("model"), str) else None,
        "max_tokens": min(max_tokens, _MAX_NEW_TOKENS),
        "temperature": float(temperature),
        "seed": seed,
        "include_usage": bool(options.get("include_usage")) if isinstance(options, dict) else False,
    }


def _as_chunks(answer: dict[str, Any], extras: dict[str, Any], request: dict[str, Any]) -> list[bytes]:
    """The answer as OpenAI stream chunks: a role chunk, one chunk per token, the finish."""
    base = {
        "id": answer["id"],
        "object": "chat.completion.chunk",
        "created": answer["created"],
        "model": answer["model"],
    }

    def event(choices: list[dict[str, Any]], **more: Any) -> bytes:
        return b"data: " + json.dumps({**base, "choices": choices, **more}).encode() + b"\n\n"

    events = [event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])]
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    for token in extras["response_ids"]:
        piece = decoder.decode(bytes([token])) if token < 256 else ""
        if piece:
            events.append(event([{"index": 0, "delta": {"content": piece}, "finish_reason": None}]))
    tail = decoder.decode(b"", final=True)
    if tail:
        events.append(event([{"index": 0, "delta": {"content": tail}, "finish_reason": None}]))
    finish = answer["choices"][0]["finish_reason"]
    events.append(event([{"index": 0, "delta": {}, "finish_reason": finish}]))
    if request["include_usage"]:
        events.append(event([], usage=answer["usage"]))
    events.append(b"data: [DONE]\n\n")
    return events
