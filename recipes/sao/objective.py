"""SAO's objective: the critic's advantages, and the policy step under the DIS mask (torch).

One scored rollout is one step.  Its advantages come from the value model by generalised
advantage estimation with the reward at the end of the answer and no discount, at the paper's
length-adaptive ``lambda = 1 - 1 / (alpha * length)``; the value model itself learns towards
Monte-Carlo returns (``lambda = 1``: every token's return is the score).  The policy loss of a
token is ``-sg(f(r)) * A * log pi(token)``, with ``r`` the ratio of the policy's probability of the
token to the rollout's (the log-prob the engine recorded when it sampled it) and ``f(r) = r``
strictly inside ``(1 - clip_low, 1 + clip_high)``, ``0`` outside: a token the policy has moved
too far from, in either direction and whatever its advantage's sign, gives no gradient (PPO's
clip keeps one side, by the advantage's sign).  Inside the band the gradient is PPO's unclipped
one, ``-A * grad r``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from recipes.grpo.objective import Policy, Scorer, StepStats
from recipes.grpo.samples import Sample

__all__ = ["adaptive_lambda", "advantages", "sao_step"]


def adaptive_lambda(length: int, alpha: float) -> float:
    """The paper's length-adaptive GAE lambda for an answer of ``length`` tokens: longer answers
    lean on the critic less (lambda nearer 1, nearer the Monte-Carlo return)."""
    return max(0.0, 1.0 - 1.0 / (alpha * max(1, length)))


def advantages(values: Tensor, reward: float, lam: float) -> Tensor:
    """Each token's advantage, by GAE with no discount: ``delta_t = V(s_t+1) - V(s_t)``, and for the
    last token ``reward - V(s_t)`` (the answer ends; the score is its only reward)."""
    following = torch.cat([values[1:], torch.tensor([reward], dtype=values.dtype)])
    deltas = following - values
    out = torch.zeros_like(values)
    running = 0.0
    for t in range(len(values) - 1, -1, -1):
        running = float(deltas[t]) + lam * running
        out[t] = running
    return out


def sao_step(
    policy: Policy,
    reference: Scorer,
    optimizer: torch.optim.Optimizer,
    sample: Sample,
    token_advantages: Tensor,
    *,
    clip_low: float,
    clip_high: float,
    kl_coef: float = 0.0,
    epochs: int = 1,
) -> StepStats:
    """``epochs`` updates of ``policy`` on one scored rollout (see the module docstring); with
    ``kl_coef`` a k3 KL term to ``reference`` (the paper uses none).  Stats of the last pass;
    ``clipped`` is the share of the answer's tokens the mask left out."""
    prompts, responses = [list(sample.prompt_ids)], [list(sample.response_ids)]
    temperature = [sample.temperature]
    recorded = len(sample.logprobs)
    ref_logp = None
    if kl_coef:
        with torch.no_grad():
            ref_logp = reference.sequence_logprobs(prompts, responses, temperature=temperature)[0][0]
    policy.train()
    loss_value = kl_value = masked = 0.0
    for _ in range(max(1, epochs)):
        optimizer.zero_grad()
        logp, mask = policy.sequence_logprobs(prompts, responses, temperature=temperature)
        logp, mask = logp[0], mask[0].clone()
        mask[recorded:] = 0.0  # a token without its rollout log-prob has no ratio
        behaviour = torch.zeros_like(logp)
        behaviour[: min(recorded, len(logp))] = torch.tensor(sample.logprobs[: len(logp)])
        ratio = torch.exp((logp - behaviour).detach())
        keep = ((ratio > 1 - clip_low) & (ratio < 1 + clip_high)).to(logp.dtype) * mask
        per_token = -(ratio * keep) * token_advantages[: len(logp)] * logp
        k3 = torch.zeros_like(logp)
        if ref_logp is not None:
            log_ratio = (ref_logp - logp) * mask
            k3 = torch.exp(log_ratio) - log_ratio - 1
        tokens = mask.sum().clamp(min=1)
        loss = ((per_token + kl_coef * k3) * mask).sum() / tokens
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        optimizer.step()
        with torch.no_grad():
            loss_value = float(loss.detach())
            kl_value = float((k3 * mask).sum() / tokens)
            masked = float(((1 - keep) * mask).sum() / tokens)
    policy.eval()
    return StepStats(loss=loss_value, kl=kl_value, clipped=masked, samples=1, reward_mean=sample.reward)
