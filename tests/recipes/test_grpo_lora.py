"""grpo with LoRA on ``transformers`` models: the policy step on a tiny random Llama (fast)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import torch

from recipes.grpo.lora import LoraPolicy, LoraSettings, state_digest
from recipes.grpo.objective import group_advantages, policy_step
from recipes.grpo.samples import Sample
from reef_core.upstream.transformers_engine import TransformersEngine
from tests.models.tiny_hf import write_llama_dir


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> TransformersEngine:
    from reef_core.models import hf

    source = hf.resolve(str(write_llama_dir(tmp_path_factory.mktemp("llama") / "tiny")))
    model, tokenizer = hf.load(source, cache=tmp_path_factory.mktemp("cache"))
    return TransformersEngine(model, tokenizer, model_name=source.spec, identity=source.sha256)


def fingerprint(model: Any) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode() + tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def test_lora_steps_rewarding_a_token_raise_its_logprob_and_leave_the_base_alone(engine: TransformersEngine):
    base_weights = fingerprint(engine.model)
    policy = LoraPolicy(engine, LoraSettings(), seed=0)
    prompt = [
        int(t) for t in engine.tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    ]
    target = int(engine.tokenizer.encode("S")[0])
    generator = torch.Generator().manual_seed(0)
    responses = [[int(t) for t in torch.randint(0, 256, (4,), generator=generator)] for _ in range(8)]
    for response in responses[::2]:
        response[0] = target  # half the answers open with the rewarded token

    @torch.no_grad()
    def first_token_logprob(state: Any) -> float:
        logp, _ = policy.view(state).sequence_logprobs([prompt], [[target]])
        return float(logp[0, 0])

    before = first_token_logprob(None)
    assert first_token_logprob(policy.initial) == pytest.approx(before, abs=1e-6)  # B = 0: the base
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    for _ in range(4):
        with torch.no_grad():
            old, _ = policy.sequence_logprobs([prompt] * 8, responses)
        samples = [
            Sample(f"r{i}", "rep", tuple(prompt), tuple(r), tuple(old[i].tolist()), float(r[0] == target), 0)
            for i, r in enumerate(responses)
        ]
        stats = policy_step(
            policy, policy.reference(), optimizer, group_advantages([samples]), kl_coef=0.05, clip=0.2
        )
    trained = policy.state()
    assert set(trained) == set(policy.initial) and state_digest(trained) != "base"
    assert stats.kl > 0 and stats.samples == 8
    assert first_token_logprob(trained) > before + 0.1
    assert first_token_logprob(None) == pytest.approx(before, abs=1e-6)  # the base is still the base
    assert fingerprint(engine.model) == base_weights
    assert all(k.endswith(("lora_A.weight", "lora_B.weight")) for k in trained)
