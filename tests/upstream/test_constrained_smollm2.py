"""``response_format`` on the ``transformers`` engine with the real SmolLM2-135M-Instruct: JSON
its schema validates for several seeds and temperatures, streamed or not; a batch whose rows
each follow their own schema (or none); and the 400s.

Sampled text is never asserted, only what the schema makes of it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from reef_core.errors import UpstreamRejected
from reef_core.upstream.transformers_engine import TransformersEngine
from tests.upstream.schemas import CITY, PET, TOOL, fmt, violations
from tests.upstream.smollm2 import model_cache, smollm2

__all__ = ["model_cache", "smollm2"]

pytestmark = pytest.mark.slow

CHAT = "/v1/chat/completions"
PROMPTS = {
    "pet": "Describe a pet as JSON with its name, age, kind and tags.",
    "city": "Name a big city as JSON: city, population, and whether it is a capital.",
    "tool": "Which tool should I call to search for pages 3 and 7? Answer as JSON.",
    "text": "What is the capital of France?",
}


@pytest.fixture(scope="module")
def engine(smollm2) -> TransformersEngine:
    source, model, tokenizer = smollm2
    return TransformersEngine(model, tokenizer, model_name=source.spec, identity=source.sha256)


def body(prompt: str, **fields: Any) -> bytes:
    return json.dumps(
        {"messages": [{"role": "user", "content": PROMPTS[prompt]}], "max_tokens": 128, **fields}
    ).encode()


async def ask(engine: TransformersEngine, prompt: str, **fields: Any) -> dict[str, Any]:
    reply = await engine.request("POST", CHAT, headers={}, body=body(prompt, **fields))
    return json.loads(reply.body)["choices"][0]


async def streamed(engine: TransformersEngine, prompt: str, **fields: Any) -> tuple[str, str]:
    """The streamed text and the last chunk's finish reason."""
    opened = await engine.stream(CHAT, headers={}, body=body(prompt, stream=True, **fields))
    events = [json.loads(e[6:]) async for e in opened.chunks() if e != b"data: [DONE]\n\n"]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in events)
    return text, events[-1]["choices"][0]["finish_reason"]


def together(*calls: Any) -> list[Any]:
    async def run() -> list[Any]:
        return await asyncio.gather(*calls)

    return asyncio.run(run())


def test_answers_are_json_their_schema_validates_for_any_seed_and_temperature(engine: TransformersEngine):
    settings = [(0, 0.0), (1, 0.7), (2, 0.7), (3, 1.0), (4, 1.0)]
    answers = together(
        *(ask(engine, "pet", seed=s, temperature=t, response_format=fmt(PET)) for s, t in settings),
        ask(engine, "pet", seed=5, temperature=1.0, top_p=0.9, response_format=fmt(PET)),
    )
    for answer in answers:
        assert answer["finish_reason"] == "stop", answer
        assert violations(json.loads(answer["message"]["content"]), PET) == []


def test_streamed_answers_are_valid_json_when_the_stream_ends(engine: TransformersEngine):
    results = together(
        streamed(engine, "pet", seed=11, temperature=0.8, response_format=fmt(PET)),
        streamed(engine, "city", seed=12, temperature=1.0, response_format=fmt(CITY)),
        streamed(engine, "city", temperature=0.0, response_format={"type": "json_object"}),
    )
    for (text, finish), schema in zip(results, [PET, CITY, None], strict=True):
        assert finish == "stop"
        value = json.loads(text)
        assert isinstance(value, dict) and (schema is None or violations(value, schema) == [])


def test_each_row_of_a_batch_follows_its_own_schema_or_none(engine: TransformersEngine):
    before = dict(engine.stats)
    pet, city, tool, anything, text = together(
        ask(engine, "pet", seed=21, temperature=0.8, response_format=fmt(PET, "pet")),
        ask(engine, "city", seed=22, temperature=0.8, response_format=fmt(CITY, "city")),
        ask(engine, "tool", seed=23, temperature=0.8, response_format=fmt(TOOL, "tool")),
        ask(engine, "city", temperature=0, response_format={"type": "json_object"}),
        ask(engine, "text", temperature=0, max_tokens=16),
    )
    assert engine.stats["batches"] - before["batches"] < 5  # decoded together, not one by one
    for answer, schema in ((pet, PET), (city, CITY), (tool, TOOL)):
        assert answer["finish_reason"] == "stop"
        assert violations(json.loads(answer["message"]["content"]), schema) == []
    # any object will do, so a small model may write one for ever: asked greedily for a city it
    # writes a short one
    assert anything["finish_reason"] == "stop"
    assert isinstance(json.loads(anything["message"]["content"]), dict)
    # the unconstrained row answers as it does alone (SmolLM2's greedy answer, as in
    # test_transformers_engine), not JSON
    assert text["message"]["content"] == "The capital of France is Paris."


def test_max_tokens_cuts_a_constrained_answer_with_finish_length(engine: TransformersEngine):
    [answer] = together(ask(engine, "pet", temperature=0, max_tokens=4, response_format=fmt(PET)))
    assert answer["finish_reason"] == "length"
    assert answer["message"]["content"].startswith("{")
    with pytest.raises(ValueError):
        json.loads(answer["message"]["content"])


@pytest.mark.parametrize(
    ("response_format", "said"),
    [
        (fmt({"type": "array", "uniqueItems": True}), "uniqueItems"),
        (fmt({"type": "object", "not": {"required": ["a"]}}), "not"),
        (fmt({"type": "string", "format": "colour"}), "colour"),
        ({"type": "json_schema", "json_schema": {"schema": PET}}, "name"),
        ({"type": "yaml"}, "response_format.type"),
    ],
)
def test_what_cannot_be_honoured_is_a_400_before_anything_streams(engine, response_format, said):
    with pytest.raises(UpstreamRejected) as refused:
        together(streamed(engine, "pet", response_format=response_format))
    assert refused.value.status == 400 and said in refused.value.message
    assert json.loads(refused.value.body)["error"]["param"] == "response_format"
