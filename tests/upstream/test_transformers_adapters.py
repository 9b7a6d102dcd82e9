"""LoRA adapters in the ``transformers`` engine: a scenario served an adapter answers with it,
``None`` gives back the base model exactly, scenarios with different adapters each get their own,
and the base weights are never touched.

A tiny random Llama (offline, fast) for everything; one slow test on SmolLM2.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from reef_core.errors import ConfigError
from reef_core.upstream.transformers_engine import LORA_DEFAULTS, TransformersEngine
from tests.models.tiny_hf import write_llama_dir
from tests.upstream.smollm2 import model_cache, smollm2

__all__ = ["model_cache", "smollm2"]

HELLO = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> TransformersEngine:
    from reef_core.models import hf

    source = hf.resolve(str(write_llama_dir(tmp_path_factory.mktemp("llama") / "tiny")))
    model, tokenizer = hf.load(source, cache=tmp_path_factory.mktemp("cache"))
    return TransformersEngine(model, tokenizer, model_name=source.spec, identity=source.sha256)


def adapter(engine: TransformersEngine, seed: int, scale: float = 0.5) -> dict[str, torch.Tensor]:
    """A LoRA adapter for ``engine``'s model with random (nonzero) weights."""
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict

    settings = {k: v for k, v in LORA_DEFAULTS.items() if k != "peft_type"}
    torch.manual_seed(seed)
    state = get_peft_model_state_dict(
        get_peft_model(engine.shared_copy(), LoraConfig(**settings)), save_embedding_layers=False
    )
    return {k: torch.randn_like(v) * scale for k, v in state.items()}


def body(messages: list[dict[str, Any]] = HELLO, **fields: Any) -> bytes:
    return json.dumps({"messages": messages, "max_tokens": 8, "temperature": 0, **fields}).encode()


async def _ask(engine: TransformersEngine, scenario: str | None, **fields: Any) -> dict[str, Any]:
    reply = await engine.request(
        "POST", "/v1/chat/completions", headers={}, body=body(**fields), scenario=scenario
    )
    return reply.extras


def ask(engine: TransformersEngine, scenario: str | None, **fields: Any) -> dict[str, Any]:
    return asyncio.run(_ask(engine, scenario, **fields))


def fingerprint(model: Any) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode() + tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def test_an_adapter_changes_the_answer_and_none_restores_the_base_exactly(engine: TransformersEngine):
    base_weights = fingerprint(engine.model)
    base = ask(engine, "a")
    assert base["weight_version"] == 0 and engine.version("a") == 0
    seconds = engine.swap("a", adapter(engine, 1), 3)
    assert seconds >= 0 and engine.version("a") == 3
    adapted = ask(engine, "a")
    assert adapted["weight_version"] == 3
    assert adapted["logprobs"] != base["logprobs"]
    assert ask(engine, "elsewhere")["logprobs"] == base["logprobs"]  # other scenarios keep the base
    engine.swap("a", None, 4)
    restored = ask(engine, "a")
    assert restored["weight_version"] == 4
    assert restored["response_ids"] == base["response_ids"] and restored["logprobs"] == base["logprobs"]
    assert fingerprint(engine.model) == base_weights  # the base model was never touched


def test_adapter_state_gives_back_what_was_swapped_in(engine: TransformersEngine):
    assert engine.adapter_state("fresh") == (None, 0)
    state = adapter(engine, 2)
    engine.swap("b", state, 7)
    copy, version = engine.adapter_state("b")
    assert version == 7 and copy is not None and set(copy) == set(state)
    assert all(torch.equal(copy[k], state[k]) for k in state)
    copy[next(iter(copy))].zero_()  # a private copy: changing it changes nothing served
    again, _ = engine.adapter_state("b")
    assert again is not None and all(torch.equal(again[k], state[k]) for k in state)


def test_scenarios_served_different_adapters_concurrently_each_get_their_own(engine: TransformersEngine):
    engine.swap("x", adapter(engine, 3), 1)
    engine.swap("y", adapter(engine, 4), 2)
    alone = {s: ask(engine, s) for s in ("x", "y", None)}
    assert alone["x"]["logprobs"] != alone["y"]["logprobs"] != alone[None]["logprobs"]
    before = engine.stats["batches"]

    async def together() -> list[dict[str, Any]]:
        return await asyncio.gather(*(_ask(engine, s) for s in ["x", "y", None] * 4))

    answers = asyncio.run(together())
    for scenario, answer in zip(["x", "y", None] * 4, answers, strict=True):
        assert answer["response_ids"] == alone[scenario]["response_ids"]
        assert answer["logprobs"] == pytest.approx(alone[scenario]["logprobs"], abs=1e-4)
        assert answer["weight_version"] == alone[scenario]["weight_version"]
    assert engine.stats["batches"] - before >= 3  # one adapter per batch


def test_an_adapter_that_does_not_fit_is_refused_and_serving_stays(engine: TransformersEngine):
    engine.swap("z", adapter(engine, 5), 1)
    served = ask(engine, "z")
    wrong = {k: torch.zeros(v.shape[0] + 1, v.shape[1]) for k, v in adapter(engine, 6).items()}
    with pytest.raises(ConfigError, match="does not fit"):
        engine.swap("z", wrong, 2)
    with pytest.raises(ConfigError, match="do not fit"):
        engine.swap("z", adapter(engine, 6), 2, config={**LORA_DEFAULTS, "target_modules": ["nowhere"]})
    with pytest.raises(ConfigError, match="LoRA"):
        engine.swap("z", adapter(engine, 6), 2, config={"peft_type": "IA3"})
    assert engine.version("z") == 1 and ask(engine, "z")["logprobs"] == served["logprobs"]


@pytest.mark.slow
def test_smollm2_served_an_adapter_and_back(smollm2, tmp_path: Path):
    source, model, tokenizer = smollm2
    engine = TransformersEngine(model, tokenizer, model_name=source.spec, identity=source.sha256)
    france = [{"role": "user", "content": "What is the capital of France?"}]
    base = asyncio.run(_ask(engine, "s", messages=france, max_tokens=12))
    engine.swap("s", adapter(engine, 1, scale=0.02), 1)
    adapted = asyncio.run(_ask(engine, "s", messages=france, max_tokens=12))
    assert adapted["logprobs"] != base["logprobs"] and adapted["weight_version"] == 1
    engine.swap("s", None, 2)
    restored = asyncio.run(_ask(engine, "s", messages=france, max_tokens=12))
    assert restored["response_ids"] == base["response_ids"] and restored["logprobs"] == base["logprobs"]
    asyncio.run(engine.close())
