"""The grpo gate's statistics and settings, without a model: what decides that a step is judged,
how far its held-out estimate may dip, and which held-out answers it is judged on."""

from __future__ import annotations

import pytest

from recipes.grpo.objective import Estimate, difference_error
from recipes.grpo.recipe import GrpoConfig
from recipes.grpo.samples import Sample, recent
from reef_core.errors import ConfigError


def _sample(reward: float, version: int = 1, n: int = 0) -> Sample:
    return Sample(f"rec_{n}", "rep", (1, 2), (3,), (-1.0,), reward, version)


def test_a_candidate_that_weighs_the_answers_as_the_served_model_does_has_no_noise() -> None:
    samples = [_sample(r, n=i) for i, r in enumerate([1, 0, 1, 0, 0])]
    same = Estimate(0.4, 5.0, (1.0,) * 5)
    assert difference_error(same, same, samples) == 0.0


def test_the_paired_error_is_the_delta_method_one() -> None:
    # now: equal weights, mean 1/2; new: twice the weight on the two answers scored 1, mean 2/3.
    # Each answer's influence: new's w(r - 2/3)/6 less now's (r - 1/2)/4, i.e. ±1/72; four of them.
    samples = [_sample(r, n=i) for i, r in enumerate([1, 0, 1, 0])]
    now = Estimate(0.5, 4.0, (1.0, 1.0, 1.0, 1.0))
    new = Estimate(2 / 3, 3.6, (2.0, 1.0, 2.0, 1.0))
    assert difference_error(now, new, samples) == pytest.approx(2 / 72)


def test_the_error_grows_as_the_candidate_rests_on_fewer_answers() -> None:
    samples = [_sample(r, n=i) for i, r in enumerate([1, 0] * 8)]
    now = Estimate(0.5, 16.0, (1.0,) * 16)
    near = Estimate(0.55, 15.0, tuple(1.2 if s.reward else 1.0 for s in samples))
    far = Estimate(0.9, 3.0, tuple(20.0 if i < 2 else 1.0 for i in range(16)))
    assert 0 < difference_error(now, near, samples) < difference_error(now, far, samples)


def test_the_check_judges_on_the_answers_of_recent_releases() -> None:
    old = [_sample(0, version=1, n=i) for i in range(20)]
    new = [_sample(1, version=6, n=100 + i) for i in range(16)]
    # at v8 with staleness 4, v1's answers are too old: only v6's are judged on
    assert recent(old + new, 8, 4, 16) == new
    # too few recent ones: the newest `least` of all, old ones included
    assert recent(old + new[:4], 8, 4, 16) == old[-12:] + new[:4]


@pytest.mark.parametrize("key", ["epochs", "group_size", "groups_per_step", "heldout_min", "lora_rank"])
def test_counts_below_one_are_refused_naming_the_setting(key: str) -> None:
    with pytest.raises(ConfigError, match=f"recipe.config.{key} must be 1 or more"):
        GrpoConfig.from_config({key: "0"})


def test_epochs_and_the_effective_share_are_settings() -> None:
    config = GrpoConfig.from_config({"epochs": "2", "heldout_effective": "0.2"})
    assert (config.epochs, config.heldout_effective) == (2, 0.2)


def test_answers_sampled_at_any_temperature_train_on_policy() -> None:
    """The served policy's first update on its own answers sees ratios of 1 (nothing clipped)
    whatever temperature each answer was drawn at: it scores each at its own temperature."""
    import torch

    from recipes.grpo.objective import policy_step
    from reef_core.models.tiny import TinyConfig, TinyLM
    from reef_core.models.tiny.tokenizer import BOS

    torch.manual_seed(0)
    model = TinyLM(TinyConfig(d_model=64, n_layer=2, n_head=2, max_len=128))
    reference = TinyLM(model.config)
    reference.load_state_dict(model.state_dict())
    prompt = [BOS, 72, 105]
    weighted = []
    for i, temperature in enumerate([0.3, 0.3, 0.7, 0.7, 1.0, 1.0, 1.6, 1.6]):
        (answer,) = model.generate(
            [prompt], max_new_tokens=12, temperature=temperature, generator=torch.Generator().manual_seed(i)
        )
        sample = Sample(
            f"rec_{i}",
            "rep",
            tuple(prompt),
            tuple(answer.tokens),
            tuple(answer.logprobs),
            float(i % 2),
            1,
            temperature,
        )
        weighted.append((sample, 1.0 if i % 2 else -1.0))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    stats = policy_step(model, reference, optimizer, weighted, kl_coef=0.05, clip=0.01)
    assert stats.clipped == 0.0  # at temperature 1 only, the 0.3 and 1.6 answers' ratios are far from 1
    # and the estimate of the model that wrote them weighs them all alike
    from recipes.grpo.objective import estimate_reward

    with torch.no_grad():
        reference_estimate = estimate_reward(reference, [s for s, _ in weighted])
    assert reference_estimate.weights == pytest.approx((1.0,) * 8, abs=1e-4)
