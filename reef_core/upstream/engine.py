"""What every model served in-process shares: one base, :class:`Engine`, for the embedded model
(:mod:`~reef_core.upstream.local`) and for ``transformers`` models
(:mod:`~reef_core.upstream.transformers_engine`).

An engine is an :class:`~reef_core.upstream.seam.Answerer`, so the daemon talks to it exactly as
to an HTTP upstream and translation, relaying and recording need no special case.  The base owns
what does not depend on the model:

* **the routes**: ``GET /v1/models`` lists the one model, ``POST /v1/chat/completions`` is
  answered, anything else is a 404 that names the engine;
* **parsing**: a chat-completions body checked into the settings every engine honours (max
  tokens, temperature, seed, one choice, usage in the stream, ``response_format``), then the
  engine's own (:meth:`Engine._options`) and the prompt's token ids (:meth:`Engine._prompt`), so
  a request the model cannot take is a 400 before anything streams;
* **constraints**: a ``response_format`` becomes the answer's
  :class:`~reef_core.upstream.constrain.Matcher` (``request["constraint"]``), made with the
  engine's :meth:`Engine._vocabulary`; the engine masks each step's logits with it
  (:mod:`~reef_core.upstream.constrain`).  An engine without a vocabulary refuses one (400);
* **answers**: the OpenAI answer, and :class:`EngineStream`, which sends each piece of text as
  the engine emits it, then the finish, the usage and ``[DONE]``;
* **the token record** (``extras``): what only a local engine knows, the prompt and response
  token ids, their log-probs, the temperature and the weight version of every answer, which the
  record keeps for training;
* **swaps**: each scenario is served its own weights (its current release), or the base model
  when it has none; a swap replaces what a scenario is served under the lock the engine decodes
  under, so it waits for the answer in flight, the next answer uses the new weights and no answer
  mixes two versions.

An engine adds how its model reads messages (:meth:`Engine._prompt`), how it generates
(:meth:`Engine._submit`: on a thread of its own, off the event loop, emitting text as it comes),
and what its weights are and how they change.

This module imports no torch: only the engines that need it do.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from abc import abstractmethod
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from reef_core.errors import InvalidInput, UpstreamRejected
from reef_core.upstream import constrain
from reef_core.upstream.seam import Answerer, Ask, UpstreamReply

__all__ = ["CHAT_PATH", "Answer", "Emit", "Engine", "EngineStream", "usage"]

CHAT_PATH = "/v1/chat/completions"

#: where an engine sends each new piece of an answer's text while it streams
Emit = Callable[[str], None]


@dataclass(frozen=True)
class Answer:
    """A finished answer: its text, why it ended (``stop`` or ``length``) and its token record."""

    text: str
    finish: str
    extras: dict[str, Any]


class _Served(Protocol):
    """What a scenario is served; each engine keeps its own kind of record."""

    @property
    def version(self) -> int: ...


S = TypeVar("S", bound=_Served)


class EngineStream:
    """An answer streamed as it is generated: OpenAI SSE chunks, one per new piece of text."""

    status = 200

    def __init__(
        self,
        head: dict[str, Any],
        pieces: asyncio.Queue[str | None],
        done: Future[Answer],
        include_usage: bool,
    ) -> None:
        self._head = head
        self._pieces = pieces  # None: the text is complete
        self._done = done
        self._include_usage = include_usage
        #: filled when the answer is complete (the record reads it then)
        self.extras: dict[str, Any] = {}

    def _event(self, choices: list[dict[str, Any]], **more: Any) -> bytes:
        return b"data: " + json.dumps({**self._head, "choices": choices, **more}).encode() + b"\n\n"

    async def chunks(self) -> AsyncIterator[bytes]:
        yield self._event(
            [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]
        )
        while (piece := await self._pieces.get()) is not None:
            yield self._event([{"index": 0, "delta": {"content": piece}, "finish_reason": None}])
        answer = await asyncio.wrap_future(self._done)
        self.extras.update(answer.extras)
        yield self._event([{"index": 0, "delta": {}, "finish_reason": answer.finish}])
        if self._include_usage:
            yield self._event([], usage=usage(answer.extras))
        yield b"data: [DONE]\n\n"

    def close(self) -> None:
        pass


class Engine(Answerer, Generic[S]):
    """A model served in-process behind the daemon's seam; ``S`` is what a scenario is served."""

    configured = True
    #: the grpo recipe trains the engines that say so
    trainable = True
    #: how the engine is named in the errors it answers ("the embedded model")
    label: ClassVar[str]
    #: an answer's id is ``<id_prefix>-<n>``
    id_prefix: ClassVar[str]
    default_new_tokens: ClassVar[int]
    max_new_tokens: ClassVar[int]
    lowest_temperature: ClassVar[float]
    #: the 400 for a temperature out of range
    temperature_error: ClassVar[str]

    def __init__(self, model_name: str, base: S) -> None:
        self.model_name = model_name
        self.base_url: str | None = model_name
        self._base = base  # what a scenario with no weights of its own is served (version 0)
        self._served: dict[str, S] = {}
        self._lock = threading.Lock()  # held while an answer is decoded; a swap waits for it
        self._counter = 0

    # -- weights -----------------------------------------------------------------------------

    def version(self, scenario: str | None) -> int:
        """The weight version ``scenario`` is served (0: the base model)."""
        return self._serving(scenario).version

    def _serving(self, scenario: str | None) -> S:
        return self._served.get(scenario or "", self._base)

    def _swap(self, scenario: str, make: Callable[[S], S], *, started: float | None = None) -> float:
        """Serve ``scenario`` what ``make`` builds from what it is served now, from the next
        answer on.  ``make`` runs under the lock the engine decodes under; if it raises, what was
        served stays.  Returns the seconds since ``started`` (default: now), the wait for the
        answer in flight included."""
        started = time.perf_counter() if started is None else started
        with self._lock:
            self._served[scenario] = make(self._serving(scenario))
        return time.perf_counter() - started

    def forget(self, key: str) -> None:
        """Stop serving ``key`` weights of its own (a canary that ended): what it held is freed
        and a request under it is answered by the base model."""
        with self._lock:
            old = self._served.pop(key, None)
            if old is not None:
                self._forgotten(old)

    def _forgotten(self, old: S) -> None:
        """Free what ``old`` held beyond memory Python reclaims (called under the lock)."""

    # -- the upstream surface ----------------------------------------------------------------

    async def _request(self, ask: Ask) -> UpstreamReply:
        if ask.method == "GET" and ask.path == "/v1/models":
            listing = {
                "object": "list",
                "data": [{"id": self.model_name, "object": "model", "created": 0, "owned_by": "reef"}],
            }
            return UpstreamReply(200, "application/json", json.dumps(listing).encode())
        self._only_chat(ask)
        request = self._parse(ask.body)
        head = self._head(request, "chat.completion")
        answer = await asyncio.wrap_future(self._submit(request, scenario=ask.scenario, emit=None))
        completion = {
            **head,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer.text},
                    "finish_reason": answer.finish,
                    "logprobs": None,
                }
            ],
            "usage": usage(answer.extras),
        }
        return UpstreamReply(200, "application/json", json.dumps(completion).encode(), answer.extras)

    async def _stream(self, ask: Ask) -> EngineStream:
        self._only_chat(ask)
        request = self._parse(ask.body)
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue[str | None] = asyncio.Queue()

        def emit(piece: str | None) -> None:
            loop.call_soon_threadsafe(pieces.put_nowait, piece)

        done = self._submit(request, scenario=ask.scenario, emit=emit)
        done.add_done_callback(lambda _: emit(None))  # the text ends with the answer, however it ends
        head = self._head(request, "chat.completion.chunk")
        return EngineStream(head, pieces, done, request["include_usage"])

    def _only_chat(self, ask: Ask) -> None:
        if ask.method != "POST" or ask.path != CHAT_PATH:
            raise UpstreamRejected(
                f"{self.label} does not serve {ask.method} {ask.path}",
                status=404,
                body=b'{"error": {"message": "not found", "type": "not_found_error"}}',
            )

    def _head(self, request: dict[str, Any], kind: str) -> dict[str, Any]:
        self._counter += 1
        return {
            "id": f"{self.id_prefix}-{self._counter}",
            "object": kind,
            "created": int(time.time()),
            "model": request["model"] or self.model_name,
        }

    # -- requests ----------------------------------------------------------------------------

    def _parse(self, body: bytes | None) -> dict[str, Any]:
        """A chat-completions body, checked: the settings every engine honours, the engine's own
        (:meth:`_options`) and the prompt's token ids (``prompt``, :meth:`_prompt`)."""
        try:
            data = json.loads(body or b"{}")
        except ValueError as exc:
            raise InvalidInput(f"the request body is not valid JSON: {exc}", field="body") from None
        if not isinstance(data, dict):
            raise InvalidInput("the request body must be a JSON object", field="body")
        max_tokens = data.get("max_completion_tokens", data.get("max_tokens", self.default_new_tokens))
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise InvalidInput("max_tokens must be a positive whole number", field="max_tokens")
        temperature = data.get("temperature", 1.0)
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, (int, float))
            or not self.lowest_temperature <= temperature <= 2
        ):
            raise InvalidInput(self.temperature_error, field="temperature")
        if data.get("n", 1) != 1:
            raise InvalidInput(f"{self.label} answers one choice per request (n=1)", field="n")
        seed = data.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise InvalidInput("seed must be a whole number", field="seed")
        options = data.get("stream_options") or {}
        request = {
            "messages": data.get("messages"),
            "model": data.get("model") if isinstance(data.get("model"), str) else None,
            "max_tokens": min(max_tokens, self.max_new_tokens),
            "temperature": float(temperature),
            "seed": seed,
            "include_usage": bool(options.get("include_usage")) if isinstance(options, dict) else False,
            **self._options(data),
        }
        request["constraint"] = self._constraint(data.get(constrain.FIELD))
        request["prompt"] = self._prompt(request)
        return request

    def _options(self, data: dict[str, Any]) -> dict[str, Any]:
        """The request fields only this engine honours, checked (none by default)."""
        return {}

    def _constraint(self, response_format: Any) -> constrain.Matcher | None:
        """The answer's matcher for ``response_format`` (``None``: unconstrained text)."""
        form = constrain.parse(response_format)
        if form is None:
            return None
        vocabulary = self._vocabulary()
        if vocabulary is None:
            raise constrain.rejected(f"{self.label} cannot honour {constrain.FIELD}")
        return vocabulary.matcher(form)

    def _vocabulary(self) -> constrain.Vocabulary | None:
        """The model's tokens for constrained decoding, built once (``None``: the engine
        decodes only unconstrained text)."""
        return None

    @abstractmethod
    def _prompt(self, request: dict[str, Any]) -> list[int]:
        """The prompt's token ids for the checked ``request`` (which may lower its
        ``max_tokens`` to the room the context leaves)."""

    @abstractmethod
    def _submit(self, request: dict[str, Any], *, scenario: str | None, emit: Emit | None) -> Future[Answer]:
        """Start generating the answer to ``request`` off the event loop, with the weights
        ``scenario`` is served; ``emit`` (when streaming) gets each new piece of its text."""

    @abstractmethod
    def _origin(self) -> dict[str, Any]:
        """The token record's first fields: which engine answered (and from which base)."""

    def _record(
        self,
        prompt: list[int],
        tokens: list[int],
        logprobs: Sequence[float],
        temperature: float,
        version: int,
    ) -> dict[str, Any]:
        """An answer's token record (its ``extras``)."""
        return {
            **self._origin(),
            "prompt_ids": prompt,
            "response_ids": tokens,
            "logprobs": [round(x, 6) for x in logprobs],
            "temperature": temperature,
            "weight_version": version,
        }


def usage(extras: dict[str, Any]) -> dict[str, int]:
    """An answer's OpenAI ``usage``, from its token record."""
    prompt, response = len(extras["prompt_ids"]), len(extras["response_ids"])
    return {"prompt_tokens": prompt, "completion_tokens": response, "total_tokens": prompt + response}
