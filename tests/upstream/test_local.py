"""The embedded model's engine (``LocalEngine``) on an untrained tiny model: the prompt it reads,
one-line answers with their token record, streams equal to answers, seeds, swaps and snapshots.

What the model says is never asserted (it is untrained); only how the engine serves it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from reef_core.errors import InvalidInput
from reef_core.models.tiny import TinyConfig, TinyLM, checkpoint, prompt_ids
from reef_core.upstream.local import LocalEngine

CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "how is the river?"}]


@pytest.fixture
def engine(tmp_path: Path):
    torch.manual_seed(7)
    checkpoint.save(TinyLM(TinyConfig()).eval(), tmp_path / "base")
    served = LocalEngine(tmp_path / "base")
    yield served
    asyncio.run(served.close())


def body(**fields: Any) -> bytes:
    return json.dumps({"messages": HELLO, "max_tokens": 24, "seed": 5, **fields}).encode()


def ask(engine: LocalEngine, scenario: str | None = None, **fields: Any) -> tuple[dict[str, Any], Any]:
    reply = asyncio.run(engine.request("POST", CHAT, headers={}, body=body(**fields), scenario=scenario))
    return json.loads(reply.body), reply.extras


def stream(engine: LocalEngine, **fields: Any) -> tuple[str, Any, list[dict[str, Any]]]:
    async def run() -> tuple[str, Any, list[dict[str, Any]]]:
        opened = await engine.stream(CHAT, headers={}, body=body(stream=True, **fields))
        events = [json.loads(e[len(b"data: ") :]) async for e in opened.chunks() if e != b"data: [DONE]\n\n"]
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in events if c["choices"])
        return text, opened.extras, events

    return asyncio.run(run())


def test_an_answer_is_one_line_with_its_token_record(engine: LocalEngine):
    answer, extras = ask(engine)
    [choice] = answer["choices"]
    assert answer["id"].startswith("chatcmpl-tiny-") and answer["model"] == "builtin:tiny"
    assert "\n" not in choice["message"]["content"] and 10 not in extras["response_ids"]
    assert extras["engine"] == "builtin:tiny" and extras["weight_version"] == 0
    assert extras["prompt_ids"] == prompt_ids(HELLO, engine.context - 24)
    assert len(extras["logprobs"]) == len(extras["response_ids"]) <= 24
    assert answer["usage"]["completion_tokens"] == len(extras["response_ids"])


def test_a_stream_is_the_same_answer_and_record_and_a_seed_fixes_the_sample(engine: LocalEngine):
    answer, extras = ask(engine)
    text, streamed, events = stream(engine, stream_options={"include_usage": True})
    assert text == answer["choices"][0]["message"]["content"] and streamed == extras
    assert events[-1]["usage"] == answer["usage"]
    assert ask(engine)[1]["response_ids"] == extras["response_ids"]


def test_what_the_embedded_model_cannot_take_is_a_400_before_anything_streams(engine: LocalEngine):
    for fields, field in (
        ({"temperature": 0}, "temperature"),
        ({"messages": "hi"}, "messages"),
        ({"messages": []}, "messages"),
    ):
        with pytest.raises(InvalidInput) as refused:
            asyncio.run(engine.stream(CHAT, headers={}, body=body(**fields)))
        assert refused.value.field == field


def test_a_max_tokens_the_context_cannot_hold_leaves_half_of_it_to_the_prompt(engine: LocalEngine):
    answer, extras = ask(engine, max_tokens=256, temperature=1.0)  # as much as the whole context
    assert len(extras["response_ids"]) <= engine.context // 2
    assert extras["prompt_ids"] and answer["choices"][0]["finish_reason"] in ("stop", "length")


def test_a_swap_serves_its_scenario_alone_and_a_snapshot_copies_what_is_served(engine: LocalEngine):
    _, before = ask(engine, "a")
    model, version = engine.snapshot("a")
    assert version == 0
    with torch.no_grad():
        for tensor in model.parameters():
            tensor.add_(0.5)
    assert engine.swap("a", model.state_dict(), 4) >= 0
    _, after = ask(engine, "a")
    assert after["weight_version"] == 4 and after["logprobs"] != before["logprobs"]
    _, other = ask(engine, "b")
    assert other["weight_version"] == 0 and other["logprobs"] == before["logprobs"]
    copy, version = engine.snapshot("a")
    assert version == 4
    assert all(torch.equal(copy.state_dict()[k], v) for k, v in model.state_dict().items())
    engine.swap("a", model.state_dict(), 5)  # a later release loads into the scenario's own model
    assert engine.version("a") == 5 and engine.version(None) == 0
