"""The embedded model (``builtin:tiny``) served in-process: the :class:`~reef_core.upstream.engine.Engine`
for a :class:`~reef_core.models.tiny.TinyLM`.

What it adds to the base: the tiny model's prompt (``User: …`` / ``Bot:`` lines, cut from the
left to leave room for the reply), its sampling range, and its weights.  Generation runs on one
worker thread; an answer is generated whole, cut at its first newline (a reply is one line: past
it the model starts writing the user's turn), then streamed one piece per character.

A ``response_format`` (:mod:`~reef_core.upstream.constrain`) is honoured over the byte
vocabulary: each step's logits are masked to the bytes the schema allows next, and EOS only once
the JSON is complete.  ``TinyLM.generate`` samples a whole batch with no hook between steps, so
a constrained answer is decoded here, one token at a time through the model's forward pass over
the whole sequence (no KV cache: the model and its 256-token context are small enough that this
costs a few milliseconds a token).  Compact JSON has no newline, so it is never cut.

A scenario without releases is served the pretrained base; :meth:`LocalEngine.swap` gives a
scenario a model of its own the first time and loads each later release into it.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from reef_core.models.tiny import BOS, EOS, PAD, TinyLM, checkpoint, decode, prompt_ids
from reef_core.upstream import constrain
from reef_core.upstream.choice import BUILTIN_TINY
from reef_core.upstream.engine import Answer, Emit, Engine

__all__ = ["LocalEngine"]

_NEWLINE = 10


@dataclass(frozen=True, eq=False)
class _Served:
    """A scenario's model and its version (a release loads into the scenario's own model, under
    the engine's lock)."""

    model: TinyLM
    version: int


class LocalEngine(Engine[_Served]):
    """The engine of ``builtin:tiny``."""

    label = "the embedded model"
    id_prefix = "chatcmpl-tiny"
    default_new_tokens = 64
    max_new_tokens = 256
    lowest_temperature = 0.05
    temperature_error = "the embedded model samples at a temperature from 0.05 to 2"

    def __init__(self, base_checkpoint: Path, *, model_name: str = BUILTIN_TINY) -> None:
        self.base_checkpoint = base_checkpoint
        super().__init__(model_name, _Served(self.base_model(), 0))
        self.context = self._base.model.config.max_len  # prompt plus reply, in tokens
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reef-tiny")
        self._tokens: constrain.Vocabulary | None = None  # built at the first constrained request

    # -- weights -----------------------------------------------------------------------------

    def base_model(self) -> TinyLM:
        """A fresh copy of the pretrained base model."""
        return checkpoint.load(self.base_checkpoint)

    def snapshot(self, scenario: str | None) -> tuple[TinyLM, int]:
        """A private copy of what ``scenario`` is served now (for a trainer to start from)."""
        with self._lock:
            served = self._serving(scenario)
            model = self.base_model()
            model.load_state_dict(served.model.state_dict())
            return model, served.version

    def swap(self, scenario: str, state: Mapping[str, torch.Tensor], version: int) -> float:
        """Serve ``state`` to ``scenario`` from the next answer on; returns the seconds it took
        (including the wait for the answer in flight)."""

        def load(served: _Served) -> _Served:
            model = self.base_model() if served is self._base else served.model
            model.load_state_dict(dict(state))
            return _Served(model, version)

        return self._swap(scenario, load)

    # -- answers -----------------------------------------------------------------------------

    def _prompt(self, request: dict[str, Any]) -> list[int]:
        # the reply never takes more than half the context: a long prompt keeps its newest half
        request["max_tokens"] = min(request["max_tokens"], self.context // 2)
        return prompt_ids(request["messages"] or [], self.context - request["max_tokens"])

    def _origin(self) -> dict[str, Any]:
        return {"engine": BUILTIN_TINY}

    def _vocabulary(self) -> constrain.Vocabulary:
        if self._tokens is None:  # cheap (259 tokens): a race builds it twice, harmlessly
            size = self._base.model.config.vocab_size
            self._tokens = constrain.Vocabulary.of_bytes(eos=EOS, specials=[BOS, EOS, PAD], size=size)
        return self._tokens

    def _submit(self, request: dict[str, Any], *, scenario: str | None, emit: Emit | None) -> Future[Answer]:
        return self._executor.submit(self._generate, request, scenario, emit)

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _generate(self, request: dict[str, Any], scenario: str | None, emit: Emit | None) -> Answer:
        generator = None
        if request["seed"] is not None:
            generator = torch.Generator().manual_seed(request["seed"])
        constraint = request["constraint"]
        with self._lock:
            served = self._serving(scenario)
            if constraint is not None:
                tokens, logprobs, finish = self._constrained(served.model, request, constraint, generator)
            else:
                (generation,) = served.model.generate(
                    [request["prompt"]],
                    max_new_tokens=request["max_tokens"],
                    temperature=request["temperature"],
                    generator=generator,
                )
                tokens, logprobs, finish = (
                    list(generation.tokens),
                    list(generation.logprobs),
                    generation.finish_reason,
                )
        if _NEWLINE in tokens:  # a reply is one line: past it the model starts writing the user's turn
            cut = tokens.index(_NEWLINE)
            tokens, logprobs, finish = tokens[:cut], logprobs[:cut], "stop"
        if emit is not None:
            for piece in _pieces(tokens):
                emit(piece)
        record = self._record(request["prompt"], tokens, logprobs, request["temperature"], served.version)
        return Answer(decode(tokens), finish, record)

    def _constrained(
        self,
        model: TinyLM,
        request: dict[str, Any],
        constraint: constrain.Matcher,
        generator: torch.Generator | None,
    ) -> tuple[list[int], list[float], str]:
        """An answer sampled under ``constraint``: its tokens (EOS left out, as ``generate``
        does), their log-probs under the masked distribution they were drawn from, and why it
        ended."""
        masks = constrain.Masks(self._vocabulary(), 1)
        ids = torch.tensor([request["prompt"]])
        budget = min(request["max_tokens"], self.context - ids.shape[1])
        tokens: list[int] = []
        logprobs: list[float] = []
        with torch.inference_mode():
            for _ in range(budget):
                logits = model(ids)[:, -1]
                masks.apply(logits, [constraint])
                logp = torch.log_softmax(logits[0] / request["temperature"], dim=-1)
                token = int(torch.multinomial(logp.exp(), 1, generator=generator))
                if token == EOS:
                    return tokens, logprobs, "stop"
                constraint.advance(token)
                tokens.append(token)
                logprobs.append(float(logp[token]))
                ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
        return tokens, logprobs, "length"


def _pieces(tokens: list[int]) -> Iterator[str]:
    """The text of ``tokens`` as it streams: a piece for each token that completes a character
    (ids past 255 are not text)."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    for token in tokens:
        piece = decoder.decode(bytes([token])) if token < 256 else ""
        if piece:
            yield piece
    tail = decoder.decode(b"", final=True)
    if tail:
        yield tail
