"""``response_format`` on the embedded model (an untrained tiny model, so every byte it writes is
the constraint's doing): JSON that validates for any seed and temperature, streamed or not, the
answer cut short by ``max_tokens``, and the 400s for what cannot be honoured.

What the model says is never asserted; only that it is what the schema allows."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import torch

from reef_core.errors import UpstreamRejected
from reef_core.models.tiny import TinyConfig, TinyLM, checkpoint, decode
from reef_core.upstream import constrain
from reef_core.upstream.local import LocalEngine
from tests.upstream.schemas import CITY, PET, TOOL, fmt, violations

CHAT = "/v1/chat/completions"
ASK = [{"role": "user", "content": "a pet, as JSON?"}]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("tiny") / "base"
    torch.manual_seed(7)
    checkpoint.save(TinyLM(TinyConfig()).eval(), base)
    served = LocalEngine(base)
    yield served
    asyncio.run(served.close())


def body(**fields: Any) -> bytes:
    return json.dumps({"messages": ASK, "max_tokens": 128, "seed": 5, **fields}).encode()


def ask(engine: LocalEngine, **fields: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    reply = asyncio.run(engine.request("POST", CHAT, headers={}, body=body(**fields)))
    answer = json.loads(reply.body)["choices"][0]
    return answer, reply.extras or {}


def stream(engine: LocalEngine, **fields: Any) -> tuple[str, str]:
    """The streamed text and the finish reason of its last chunk."""

    async def run() -> tuple[str, str]:
        opened = await engine.stream(CHAT, headers={}, body=body(stream=True, **fields))
        events = [json.loads(e[6:]) async for e in opened.chunks() if e != b"data: [DONE]\n\n"]
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in events)
        return text, events[-1]["choices"][0]["finish_reason"]

    return asyncio.run(run())


@pytest.mark.parametrize("temperature", [0.3, 1.0, 1.8])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("schema", [PET, CITY, TOOL], ids=["pet", "city", "tool"])
def test_an_answer_is_json_its_schema_validates(engine: LocalEngine, schema, seed, temperature):
    answer, extras = ask(engine, response_format=fmt(schema), seed=seed, temperature=temperature)
    assert answer["finish_reason"] == "stop"
    text = answer["message"]["content"]
    assert violations(json.loads(text), schema) == []
    # the token record is the text's bytes, each token's log-prob under the masked distribution
    assert decode(extras["response_ids"]) == text
    assert len(extras["logprobs"]) == len(extras["response_ids"])
    assert all(lp <= 0 for lp in extras["logprobs"])


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_a_streamed_answer_is_valid_json_when_the_stream_ends(engine: LocalEngine, seed):
    text, finish = stream(engine, response_format=fmt(PET), seed=seed, temperature=1.2)
    assert finish == "stop"
    assert violations(json.loads(text), PET) == []
    answer, _ = ask(engine, response_format=fmt(PET), seed=seed, temperature=1.2)
    assert answer["message"]["content"] == text


def test_json_object_is_a_json_object(engine: LocalEngine):
    """Any object will do, so an untrained model may write one key for ever: an answer that
    stops is a JSON object, one that does not is cut by max_tokens (``length``)."""
    answers = [ask(engine, response_format={"type": "json_object"}, seed=seed)[0] for seed in range(8)]
    stopped = [a["message"]["content"] for a in answers if a["finish_reason"] == "stop"]
    assert stopped and all(isinstance(json.loads(text), dict) for text in stopped)
    assert all(a["message"]["content"].startswith("{") for a in answers)
    assert {a["finish_reason"] for a in answers} <= {"stop", "length"}


def test_text_is_unconstrained(engine: LocalEngine):
    plain, plain_extras = ask(engine, max_tokens=24)
    text, text_extras = ask(engine, max_tokens=24, response_format={"type": "text"})
    assert text == plain and text_extras["response_ids"] == plain_extras["response_ids"]


def test_max_tokens_cuts_the_json_short_and_says_so(engine: LocalEngine):
    answer, _ = ask(engine, response_format=fmt(PET), max_tokens=12)
    assert answer["finish_reason"] == "length"
    text = answer["message"]["content"]
    assert text.startswith('{"name":"')  # what the schema forces first, and no more room
    with pytest.raises(ValueError):
        json.loads(text)


@pytest.mark.parametrize(
    ("schema", "feature"),
    [
        ({"not": {"type": "string"}}, "not"),
        ({"type": "array", "uniqueItems": True}, "uniqueItems"),
        ({"if": {"type": "string"}, "then": {"maxLength": 3}}, "if"),
        ({"type": "object", "dependentSchemas": {"a": {}}}, "dependentSchemas"),
        ({"type": "string", "format": "colour"}, "colour"),
        ({"type": "string", "pattern": "(?<=a)b"}, "look-around"),
        ({"$ref": "https://example.com/schema.json"}, "https://example.com/schema.json"),
        ({"type": "integer", "minimum": 5, "maximum": 2}, "minimum"),
    ],
)
def test_a_schema_feature_that_cannot_be_honoured_is_a_400_naming_it(engine: LocalEngine, schema, feature):
    with pytest.raises(UpstreamRejected) as refused:
        asyncio.run(engine.stream(CHAT, headers={}, body=body(stream=True, response_format=fmt(schema))))
    assert refused.value.status == 400
    assert feature in refused.value.message
    error = json.loads(refused.value.body)["error"]
    assert error["param"] == "response_format" and feature in error["message"]


@pytest.mark.parametrize(
    ("response_format", "said"),
    [
        ("json", "must be an object"),
        ({"type": "xml"}, "response_format.type"),
        ({"type": "json_schema"}, "response_format.json_schema"),
        ({"type": "json_schema", "json_schema": {"schema": PET}}, "name"),
        ({"type": "json_schema", "json_schema": {"name": "a pet", "schema": PET}}, "name"),
        ({"type": "json_schema", "json_schema": {"name": "pet", "schema": [PET]}}, "schema"),
        ({"type": "json_schema", "json_schema": {"name": "pet", "schema": PET, "strict": "yes"}}, "strict"),
    ],
)
def test_a_malformed_response_format_is_a_400(engine: LocalEngine, response_format, said):
    with pytest.raises(UpstreamRejected) as refused:
        ask(engine, response_format=response_format)
    assert refused.value.status == 400 and said in refused.value.message


def test_a_batch_masks_only_its_constrained_rows(engine: LocalEngine):
    vocabulary = engine._vocabulary()
    matcher = vocabulary.matcher(constrain.parse(fmt(PET)))
    logits = torch.zeros(2, TinyConfig().vocab_size)
    constrain.Masks(vocabulary, 2).apply(logits, [None, matcher])
    assert torch.equal(logits[0], torch.zeros(TinyConfig().vocab_size))
    assert torch.isfinite(logits[1]).nonzero().flatten().tolist() == [ord("{")]
    for byte in b'{"name":"':
        matcher.advance(byte)
    assert not matcher.complete
