"""The policy-gradient step and the off-policy score estimate (torch).

Both work on any :class:`Policy`: the embedded model (``TinyLM``) trained whole, or a
``transformers`` model's :class:`~recipes.grpo.policy.CausalPolicy` (a LoRA adapter or every
weight).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from recipes.grpo.samples import Sample

__all__ = [
    "Estimate",
    "LogProbs",
    "Policy",
    "Scorer",
    "StepStats",
    "Temperature",
    "TokenRows",
    "difference_error",
    "estimate_reward",
    "group_advantages",
    "policy_step",
]


TokenRows = list[list[int]]  # one row of token ids per prompt or response
Temperature = float | Sequence[float]  # one for every row, or one per row
LogProbs = tuple[torch.Tensor, torch.Tensor]  # (log-probs, mask), both [B, longest response]


class Scorer(Protocol):
    def sequence_logprobs(
        self, prompts: TokenRows, responses: TokenRows, *, temperature: Temperature = 1.0
    ) -> LogProbs:
        """``(log-probs, mask)`` of each response token, ``[B, longest response]``, under the
        distribution at each row's ``temperature`` (the one its answer was sampled at)."""
        ...


class Policy(Scorer, Protocol):
    """What a policy-gradient step trains: a scorer with parameters."""

    def parameters(self) -> Iterator[torch.nn.Parameter]: ...

    def train(self, mode: bool = True) -> Any: ...

    def eval(self) -> Any: ...


@dataclass(frozen=True)
class StepStats:
    loss: float
    kl: float
    clipped: float
    samples: int
    reward_mean: float


def group_advantages(groups: Sequence[Sequence[Sample]]) -> list[tuple[Sample, float]]:
    """``(sample, advantage)`` with advantages normalised within each group; groups whose
    answers all scored the same carry no signal and are left out."""
    out: list[tuple[Sample, float]] = []
    for group in groups:
        rewards = [s.reward for s in group]
        mean = sum(rewards) / len(rewards)
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
        if std < 1e-8:
            continue
        out.extend((s, (s.reward - mean) / (std + 1e-6)) for s in group)
    return out


def _batch(samples: Sequence[Sample]) -> tuple[list[list[int]], list[list[int]]]:
    return [list(s.prompt_ids) for s in samples], [list(s.response_ids) for s in samples]


def _scores(scorer: Scorer, samples: Sequence[Sample]) -> LogProbs:
    """``scorer``'s log-probs of the answers, each at the temperature it was sampled at."""
    return scorer.sequence_logprobs(*_batch(samples), temperature=[s.temperature for s in samples])


#: answers scored in one forward without grad (the reference's log-probs, the held-out estimate):
#: one forward for several answers is faster than one each (SmolLM2, 16 answers: 1.3 s in 8s,
#: 2.6 s one by one), and costs little memory without grad (8: about 100 MB over what is resident)
SCORE_CHUNK = 8


def _reference_rows(reference: Scorer, samples: Sequence[Sample]) -> list[torch.Tensor]:
    """``reference``'s log-probs of each answer's tokens, one row an answer."""
    rows: list[torch.Tensor] = []
    with torch.no_grad():
        for start in range(0, len(samples), SCORE_CHUNK):
            part = samples[start : start + SCORE_CHUNK]
            logp, mask = _scores(reference, part)
            rows += [logp[i, : int(mask[i].sum())] for i in range(len(part))]
    return rows


def policy_step(
    model: Policy,
    reference: Scorer,
    optimizer: torch.optim.Optimizer,
    weighted: Sequence[tuple[Sample, float]],
    *,
    kl_coef: float,
    clip: float,
    epochs: int = 1,
    micro_batch: int = 1,
) -> StepStats:
    """PPO-clip updates against the recorded (behaviour) log-probs, plus k3 KL to ``reference``:
    ``epochs`` passes over the same scored answers (the clip keeps later passes from straying
    far from the policy that wrote them; more passes learn more from each report).

    Each pass is one optimizer step on the whole batch's mean loss, its gradient accumulated
    over micro-batches of ``micro_batch`` answers (each backward takes its answers' share of the
    mean), so a forward with grad holds the activations of a few answers, not of the group: on
    SmolLM2 (about 2.5 MB of activations a token) a step of 16 answers took 3.2 GB of RSS whole;
    in one process it peaks about 160 MB over what is resident one answer at a time, 310 MB two
    at a time, in 6.4 s against 5.0 s (docs/research/grpo-memory.md).  The update is the batch's,
    up to the order of a sum.  The reference's log-probs need no grad: they are scored
    :data:`SCORE_CHUNK` answers at a time."""
    samples = [s for s, _ in weighted]
    size = max(1, micro_batch)
    parts = [range(start, min(len(weighted), start + size)) for start in range(0, len(weighted), size)]
    references = _reference_rows(reference, samples)
    model.train()
    for _ in range(max(1, epochs)):
        optimizer.zero_grad()
        loss_sum = kl_sum = clipped_tokens = tokens = 0.0
        for part in parts:
            chosen = [samples[i] for i in part]
            logp, mask = _scores(model, chosen)
            behaviour, ref_logp = torch.zeros_like(logp), torch.zeros_like(logp)
            for row, i in enumerate(part):
                behaviour[row, : len(samples[i].logprobs)] = torch.tensor(
                    samples[i].logprobs[: logp.shape[1]]
                )
                ref_logp[row, : len(references[i])] = references[i]
            advantages = torch.tensor([weighted[i][1] for i in part], dtype=logp.dtype).unsqueeze(1)
            ratio = torch.exp((logp - behaviour) * mask)
            unclipped = ratio * advantages
            clipped = torch.clamp(ratio, 1 - clip, 1 + clip) * advantages
            per_token = -torch.minimum(unclipped, clipped)
            log_ratio = (ref_logp - logp) * mask
            k3 = torch.exp(log_ratio) - log_ratio - 1
            lengths = mask.sum(dim=1).clamp(min=1)
            per_answer = ((per_token + kl_coef * k3) * mask).sum(dim=1) / lengths
            share = per_answer.sum() / len(samples)  # this micro-batch's part of the batch mean
            share.backward()
            with torch.no_grad():
                loss_sum += float(share)
                kl_sum += float(((k3 * mask).sum(dim=1) / lengths).sum())
                clipped_tokens += float((((ratio - 1).abs() > clip).float() * mask).sum())
                tokens += float(mask.sum())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    model.eval()
    return StepStats(  # of the last pass
        loss=loss_sum,
        kl=kl_sum / max(1, len(samples)),
        clipped=clipped_tokens / max(1.0, tokens),
        samples=len(samples),
        reward_mean=sum(s.reward for s in samples) / max(1, len(samples)),
    )


@dataclass(frozen=True)
class Estimate:
    reward: float
    effective_samples: float  # how many of the scored answers the estimate really rests on
    weights: tuple[float, ...] = ()  # each scored answer's (unnormalised) importance weight


def difference_error(now: Estimate, new: Estimate, samples: Sequence[Sample]) -> float:
    """The standard error of ``new.reward - now.reward``, two estimates on the same scored answers.

    Paired: each answer's influence on the difference is its influence on ``new`` less its
    influence on ``now`` (the delta method for self-normalised means, ``w_i (r_i - mean) / sum w``),
    so a candidate that weighs the answers as the served model does has a small error, and one
    that moved far has a large one.  The held-out check takes a dip within this noise for none.
    """
    total_now, total_new = sum(now.weights), sum(new.weights)
    if not samples or not total_now or not total_new:
        return 0.0
    variance = sum(
        (b * (s.reward - new.reward) / total_new - a * (s.reward - now.reward) / total_now) ** 2
        for a, b, s in zip(now.weights, new.weights, samples, strict=True)
    )
    return math.sqrt(variance)


@torch.no_grad()
def estimate_reward(model: Scorer, samples: Sequence[Sample], *, chunk: int = SCORE_CHUNK) -> Estimate:
    """Expected reward of ``model`` on answers scored by people, by self-normalised importance
    sampling against the policy that wrote them.

    The user's reward is unknown to reef, but their scores on held-out answers are not: the
    estimate weighs each scored answer by how much more (or less) likely ``model`` is to
    write it than the model that did.  Log-ratios are taken relative to their median and
    clipped to ±3 (a little bias for a usable variance); the effective sample size says when a
    model has moved so far from the scored answers that they no longer tell anything about it.
    """
    if not samples:
        return Estimate(float("nan"), 0.0)
    deltas = []
    # in chunks: a big vocabulary's logits are large (8 answers of SmolLM2 at a time: 1.1 GB of RSS
    # for the held-out check where 32 stacked 385 MB on what was resident)
    for start in range(0, len(samples), chunk):
        part = samples[start : start + chunk]
        logp, mask = _scores(model, part)
        for i, s in enumerate(part):
            n = len(s.logprobs)
            behaviour = torch.tensor(s.logprobs[: logp.shape[1]])
            deltas.append(float(((logp[i, :n] - behaviour[:n]) * mask[i, :n]).sum()))
    median = sorted(deltas)[len(deltas) // 2]
    weights = [math.exp(max(-3.0, min(3.0, d - median))) for d in deltas]
    total = sum(weights)
    reward = sum(w * s.reward for w, s in zip(weights, samples, strict=True)) / total
    # answers whose log-probability moved by more than the clip in either direction carry no
    # information the clip lets through: they count against the effective sample size
    informative = [w for w, d in zip(weights, deltas, strict=True) if abs(d) <= 6.0]
    ess = (sum(informative) ** 2 / sum(w * w for w in informative)) if informative else 0.0
    return Estimate(reward, ess, tuple(weights))
