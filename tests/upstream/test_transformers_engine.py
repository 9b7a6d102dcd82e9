"""The ``transformers`` engine on the real SmolLM2-135M-Instruct: answers, streams, stop
sequences, seeds, batching, the token record, and the requests it refuses.

Greedy decoding (temperature 0) is deterministic, so what the model says is asserted only there
("The capital of France is Paris." is SmolLM2's greedy answer); sampled text never is.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from reef_core.errors import InvalidInput
from reef_core.upstream.transformers_engine import TransformersEngine
from tests.upstream.smollm2 import model_cache, smollm2

__all__ = ["model_cache", "smollm2"]

pytestmark = pytest.mark.slow

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def engine(smollm2) -> TransformersEngine:
    source, model, tokenizer = smollm2
    return TransformersEngine(model, tokenizer, model_name=source.spec, identity=source.sha256)


def body(**fields: Any) -> bytes:
    return json.dumps({"messages": FRANCE, "max_tokens": 16, "temperature": 0, **fields}).encode()


def ask(engine: TransformersEngine, **fields: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    reply = asyncio.run(engine.request("POST", "/v1/chat/completions", headers={}, body=body(**fields)))
    return json.loads(reply.body), reply.extras


def stream(engine: TransformersEngine, **fields: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    async def run() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        answer = await engine.stream("/v1/chat/completions", headers={}, body=body(stream=True, **fields))
        events = [event async for event in answer.chunks()]
        assert events[-1] == b"data: [DONE]\n\n"
        return [json.loads(e[len(b"data: ") :]) for e in events[:-1]], answer.extras

    return asyncio.run(run())


def text_of(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])


def test_a_greedy_answer_and_its_token_record(engine: TransformersEngine, smollm2):
    _, _, tokenizer = smollm2
    answer, extras = ask(engine)
    [choice] = answer["choices"]
    assert choice["message"]["content"] == "The capital of France is Paris."
    assert choice["finish_reason"] == "stop"
    prompt = tokenizer.apply_chat_template(
        FRANCE, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert extras["prompt_ids"] == list(prompt)
    ids = extras["response_ids"]
    assert ids[-1] == tokenizer.eos_token_id  # the end of turn is kept: training learns to stop
    assert tokenizer.decode(ids, skip_special_tokens=True) == "The capital of France is Paris."
    assert len(extras["logprobs"]) == len(ids) and all(lp <= 0 for lp in extras["logprobs"])
    assert extras["weight_version"] == 0 and extras["base"] == smollm2[0].sha256
    assert answer["usage"] == {
        "prompt_tokens": len(prompt),
        "completion_tokens": len(ids),
        "total_tokens": len(prompt) + len(ids),
    }


def test_streaming_sends_the_same_answer_piece_by_piece(engine: TransformersEngine):
    chunks, extras = stream(engine, stream_options={"include_usage": True})
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    pieces = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(pieces) > 3  # token by token, not one block at the end
    assert text_of(chunks) == "The capital of France is Paris."
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"]["completion_tokens"] == len(extras["response_ids"])


def test_a_stop_sequence_ends_the_answer_and_is_never_sent(engine: TransformersEngine):
    answer, _ = ask(engine, stop=["Paris"])
    assert answer["choices"][0]["message"]["content"] == "The capital of France is "
    assert answer["choices"][0]["finish_reason"] == "stop"
    chunks, _ = stream(engine, stop=[" Paris", "nowhere"])
    assert text_of(chunks) == "The capital of France is"
    assert "Paris" not in json.dumps(chunks)


def test_max_tokens_cuts_the_answer(engine: TransformersEngine):
    answer, extras = ask(engine, max_tokens=3)
    assert answer["choices"][0]["finish_reason"] == "length" and len(extras["response_ids"]) == 3


def test_a_seed_makes_a_sampled_answer_reproducible(engine: TransformersEngine):
    first = ask(engine, temperature=0.9, top_p=0.95, seed=7, max_tokens=24)
    again = ask(engine, temperature=0.9, top_p=0.95, seed=7, max_tokens=24)
    assert first[1]["response_ids"] == again[1]["response_ids"]
    assert first[0]["choices"][0]["message"] == again[0]["choices"][0]["message"]


def test_requests_waiting_together_are_decoded_together(engine: TransformersEngine):
    before = dict(engine.stats)

    async def many() -> list[Any]:
        return await asyncio.gather(
            *(
                engine.request("POST", "/v1/chat/completions", headers={}, body=body(seed=i, temperature=0.8))
                for i in range(8)
            )
        )

    replies = asyncio.run(many())
    assert all(reply.status == 200 for reply in replies)
    assert engine.stats["batches"] - before["batches"] < 8
    assert engine.stats["largest"] >= 2


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "tools"),
        ({"temperature": 3}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"n": 2}, "n"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"messages": [{"role": "user", "content": "word " * 9000}]}, "messages"),
    ],
)
def test_what_the_model_cannot_do_is_refused_naming_the_field(engine: TransformersEngine, fields, field):
    with pytest.raises(InvalidInput) as refused:
        ask(engine, **fields)
    assert refused.value.field == field
