"""SGLang's token-exact chat answer, read: the engine's own prompt and output token ids and the
per-token logprobs, on the fields SGLang 0.5.23 returns them in (:func:`parse_tokenized_chat`).

Training rows are built from these ids as they are, so they need no tokenizer, and an answer that
lacks them is a :class:`~reef_core.errors.TokenCaptureError`, never a guess.  Driving the server
that answers is :mod:`reef_core.upstream.sglang`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reef_core.errors import TokenCaptureError

__all__ = ["TokenizedChat", "parse_tokenized_chat"]


@dataclass(frozen=True)
class TokenizedChat:
    """One non-streaming chat answer with the engine's own tokens: training rows need no tokenizer."""

    response: dict[str, Any]
    prompt_ids: list[int]
    output_ids: list[int]
    logprobs: list[float]
    weight_version: str | None


def parse_tokenized_chat(response: Mapping[str, Any]) -> TokenizedChat:
    """Read prompt ids, output ids and per-token logprobs from a ``/v1/chat/completions`` answer.

    SGLang 0.5.23 puts them on the first choice: ``prompt_token_ids`` (``return_prompt_token_ids``),
    ``token_ids`` (``return_token_ids``; some notes call it ``response_token_ids``), OpenAI-style
    ``logprobs.content[].logprob`` (``logprobs``), and ``meta_info.output_token_logprobs`` as
    ``[logprob, token_id, text]`` triples (``return_meta_info``), which is the fallback for both
    ids and logprobs.  ``metadata.weight_version`` names the weights that produced the answer.
    """
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise TokenCaptureError("the chat answer has no choices")
    if len(choices) > 1:
        raise TokenCaptureError(f"expected one choice, the chat answer has {len(choices)}")
    choice = choices[0]
    raw_meta = choice.get("meta_info")
    meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
    triples = meta.get("output_token_logprobs")
    triples = triples if isinstance(triples, list) else None

    prompt_ids = _int_list(choice.get("prompt_token_ids"), "prompt_token_ids")
    if prompt_ids is None:
        raise TokenCaptureError(
            "the chat answer carries no prompt_token_ids (is this SGLang >= 0.5.13, "
            f"and was return_prompt_token_ids sent?); choice keys: {sorted(choice)}"
        )

    output_ids = _int_list(choice.get("token_ids"), "token_ids")
    if output_ids is None:
        output_ids = _int_list(choice.get("response_token_ids"), "response_token_ids")
    if output_ids is None and triples is not None:
        output_ids = _int_list([_triple(t, 1) for t in triples], "meta_info.output_token_logprobs")
    if output_ids is None:
        raise TokenCaptureError(f"the chat answer carries no output token ids; choice keys: {sorted(choice)}")

    logprobs = _openai_logprobs(choice.get("logprobs"))
    if logprobs is None and triples is not None:
        logprobs = _float_list([_triple(t, 0) for t in triples])
    if logprobs is None:
        raise TokenCaptureError("the chat answer carries no per-token logprobs (was logprobs sent?)")
    if len(logprobs) != len(output_ids):
        raise TokenCaptureError(
            f"{len(output_ids)} output token ids but {len(logprobs)} logprobs in the chat answer"
        )

    version = None
    for holder in (response.get("metadata"), meta):
        if isinstance(holder, Mapping) and holder.get("weight_version") is not None:
            version = str(holder["weight_version"])
            break
    return TokenizedChat(dict(response), prompt_ids, output_ids, logprobs, version)


def _triple(item: Any, position: int) -> Any:
    if isinstance(item, list | tuple) and len(item) > position:
        return item[position]
    raise TokenCaptureError(f"malformed meta_info.output_token_logprobs entry: {item!r}")


def _int_list(value: Any, name: str) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise TokenCaptureError(f"{name} is not a list of token ids")
    return list(value)


def _float_list(values: list[Any]) -> list[float]:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise TokenCaptureError(f"logprob {v!r} is not a finite number")
        out.append(float(v))
    return out


def _openai_logprobs(value: Any) -> list[float] | None:
    if not isinstance(value, Mapping) or not isinstance(value.get("content"), list):
        return None
    entries = value["content"]
    if not all(isinstance(e, Mapping) and "logprob" in e for e in entries):
        raise TokenCaptureError("logprobs.content entries lack a logprob")
    return _float_list([e["logprob"] for e in entries])
