"""TinyLM: config, KV-cache sampling, and log-probs that training can trust."""

from __future__ import annotations

import math
import time

import pytest
import torch

from reef_core.errors import InvalidInput
from reef_core.models.tiny import BOS, EOS, PAD, TinyConfig, TinyLM, encode, prompt_ids

from .conftest import stopping_model


def _prompts() -> list[list[int]]:
    return [
        prompt_ids([{"role": "user", "content": text}], 192)
        for text in (
            "hi",
            "what do you think about the river?",
            "tell me about the cat and the long day.",
            "x",
        )
    ]


def test_config_round_trip_and_validation():
    config = TinyConfig(d_model=64, n_layer=2, n_head=2, max_len=128)
    assert TinyConfig.from_dict(config.to_dict()) == config
    assert TinyConfig().to_dict() == {
        "vocab_size": 259,
        "d_model": 128,
        "n_layer": 4,
        "n_head": 4,
        "max_len": 256,
    }
    with pytest.raises(InvalidInput) as err:
        TinyConfig.from_dict({**config.to_dict(), "dropout": 0.1})
    assert err.value.field == "dropout"
    with pytest.raises(InvalidInput):
        TinyConfig(d_model=100, n_head=3)


def test_size_and_forward_shape(untrained: TinyLM):
    assert 0.85e6 < untrained.num_parameters() < 0.87e6
    logits = untrained(torch.tensor([[BOS, *encode("User: hi")]]))
    assert logits.shape == (1, 9, 259)
    assert (logits[..., BOS] < -1e8).all() and (logits[..., PAD] < -1e8).all()  # never emitted


def test_respects_max_new_tokens_and_context_end(untrained: TinyLM):
    generator = torch.Generator().manual_seed(0)
    outs = untrained.generate(_prompts(), max_new_tokens=7, generator=generator)
    for out in outs:
        assert len(out.tokens) == len(out.logprobs) <= 7
        assert out.finish_reason == ("length" if len(out.tokens) == 7 else "stop")
        assert all(0 <= t < 256 for t in out.tokens)
        assert all(math.isfinite(lp) and lp <= 0 for lp in out.logprobs)
    long_prompt = [BOS, *[65] * 252]  # 3 slots left in a 256-token context
    (out,) = untrained.generate([long_prompt], max_new_tokens=64, generator=generator, temperature=0)
    assert len(out.tokens) <= 3
    full, room = untrained.generate([[BOS] * 256, [BOS]], max_new_tokens=5, generator=generator)
    assert (full.tokens, full.finish_reason) == ([], "length")  # no room left, even in a batch
    assert 0 < len(room.tokens) <= 5 or room.finish_reason == "stop"
    assert untrained.generate([[BOS]], max_new_tokens=0)[0].tokens == []
    assert untrained.generate([], max_new_tokens=5) == []


def test_stops_at_eos_and_reports_the_sampling_distribution():
    model = stopping_model(p_eos=0.25)
    generator = torch.Generator().manual_seed(0)
    outs = model.generate([[BOS], [BOS, 65, 66, 67], [BOS, 65]] * 4, max_new_tokens=64, generator=generator)
    assert {out.finish_reason for out in outs} == {"stop"}
    assert len({len(out.tokens) for out in outs}) > 1  # rows ended at different steps
    for out in outs:
        assert EOS not in out.tokens
        assert out.stop_logprob == pytest.approx(math.log(0.25), abs=1e-4)
        assert out.logprobs == pytest.approx([math.log(0.75 / 256)] * len(out.tokens), abs=1e-4)
    # at temperature 2 the logits halve: p(EOS) = e^(c/2) / (e^(c/2) + 256)
    hot = model.generate([[BOS]] * 8, max_new_tokens=64, temperature=2.0, generator=generator)
    c = math.log(0.25 / 0.75 * 256)
    p_eos = math.exp(c / 2) / (math.exp(c / 2) + 256)
    for out in hot:
        assert out.logprobs == pytest.approx([math.log((1 - p_eos) / 256)] * len(out.tokens), abs=1e-4)


def test_ragged_batch_matches_one_by_one(untrained: TinyLM):
    # greedy decoding removes the sampling stream, so each row must equal its solo run
    prompts = _prompts()
    batch = untrained.generate(prompts, max_new_tokens=24, temperature=0)
    for prompt, out in zip(prompts, batch, strict=True):
        (solo,) = untrained.generate([prompt], max_new_tokens=24, temperature=0)
        assert out.tokens == solo.tokens
        assert out.finish_reason == solo.finish_reason


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sequence_logprobs_match_generation(untrained: TinyLM, temperature: float):
    prompts = _prompts()
    generator = torch.Generator().manual_seed(3)
    outs = untrained.generate(prompts, max_new_tokens=40, temperature=temperature, generator=generator)
    responses = [out.tokens for out in outs]
    logprobs, mask = untrained.sequence_logprobs(prompts, responses, temperature=temperature)
    assert logprobs.shape == mask.shape == (len(prompts), max(len(r) for r in responses))
    for i, out in enumerate(outs):
        n = len(out.tokens)
        assert mask[i, :n].sum() == n and mask[i, n:].sum() == 0
        assert torch.allclose(logprobs[i, :n], torch.tensor(out.logprobs), atol=1e-4)
        assert (logprobs[i, n:] == 0).all()


def test_sequence_logprobs_are_differentiable(untrained: TinyLM):
    logprobs, mask = untrained.sequence_logprobs([[BOS, 65], [BOS]], [[66, 67, 68], []])
    assert mask.tolist() == [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]
    (-(logprobs * mask).sum()).backward()
    assert untrained.tok.weight.grad is not None and untrained.tok.weight.grad.abs().sum() > 0


def test_seeded_sampling_is_reproducible(untrained: TinyLM):
    def run(seed: int) -> list[list[int]]:
        generator = torch.Generator().manual_seed(seed)
        return [out.tokens for out in untrained.generate(_prompts(), max_new_tokens=16, generator=generator)]

    assert run(5) == run(5)
    assert run(5) != run(6)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"prompts": [[]]}, "prompts[0]"),
        ({"prompts": [[BOS, 300]]}, "prompts[0]"),
        ({"prompts": [[BOS] * 257]}, "prompts"),
        ({"prompts": [[BOS]], "max_new_tokens": -1}, "max_new_tokens"),
        ({"prompts": [[BOS]], "temperature": -0.5}, "temperature"),
        ({"prompts": [[BOS]], "temperature": float("nan")}, "temperature"),
    ],
)
def test_generate_rejects_bad_arguments(untrained: TinyLM, kwargs, field):
    with pytest.raises(InvalidInput) as err:
        untrained.generate(**kwargs)
    assert err.value.field == field


def test_sequence_logprobs_rejects_bad_arguments(untrained: TinyLM):
    with pytest.raises(InvalidInput):
        untrained.sequence_logprobs([[BOS]], [])
    with pytest.raises(InvalidInput):
        untrained.sequence_logprobs([[BOS] * 200], [[65] * 100])
    with pytest.raises(InvalidInput):
        untrained.sequence_logprobs([[BOS]], [[65]], temperature=0)


def test_generation_speed(untrained: TinyLM, capsys):
    """Measured, not asserted: machines differ.  ~30 ms per 64-token reply is the target."""
    untrained.banned[EOS] = -1e9  # every row runs the full 64 tokens
    prompt = prompt_ids([{"role": "user", "content": "what do you think about the river?"}], 192)
    generator = torch.Generator().manual_seed(0)
    results = {}
    for batch in (1, 8):
        untrained.generate([prompt] * batch, max_new_tokens=64, generator=generator)  # warm-up
        times = []
        for _ in range(5):
            start = time.perf_counter()
            untrained.generate([prompt] * batch, max_new_tokens=64, generator=generator)
            times.append(time.perf_counter() - start)
        results[batch] = min(times)
    with capsys.disabled():
        print(
            f"\n[tiny] 64 new tokens: batch 1 {results[1] * 1e3:.1f} ms ({64 / results[1]:.0f} tok/s), "
            f"batch 8 {results[8] * 1e3:.1f} ms ({8 * 64 / results[8]:.0f} tok/s), "
            f"{torch.get_num_threads()} threads"
        )
