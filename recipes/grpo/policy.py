"""What every trainable ``transformers`` policy shares: scoring, greedy answers, views, digests.

A grpo policy on a ``transformers`` model is a causal LM that trains (:attr:`CausalPolicy.lm`)
and a reference it is kept near by the KL term.  :class:`CausalPolicy` answers all that
:func:`~recipes.grpo.objective.policy_step`, :func:`~recipes.grpo.objective.estimate_reward` and
the recipe's checks ask of one (``sequence_logprobs``, ``parameters``, ``train``/``eval``,
``reference``, ``view``, ``greedy``) from the LM alone; what a kind of policy adds is what its
states are and how its reference scores: a LoRA adapter (:class:`~recipes.grpo.lora.LoraPolicy`)
or every weight (:class:`~recipes.grpo.full.FullPolicy`).
"""

from __future__ import annotations

import functools
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from recipes.grpo.objective import LogProbs, Temperature, TokenRows

__all__ = ["CausalPolicy", "FunctionScorer", "causal_logprobs", "greedy_answers", "tensors_digest"]

State = Mapping[str, Tensor]


class FunctionScorer:
    """A scorer made of a function: the policy itself, its reference, or a view of a state."""

    def __init__(self, score: Callable[[TokenRows, TokenRows, Temperature], LogProbs]) -> None:
        self._score = score

    def sequence_logprobs(
        self, prompts: TokenRows, responses: TokenRows, *, temperature: Temperature = 1.0
    ) -> LogProbs:
        """Log-probs of each response token given its prompt and the tokens before it (under
        the distribution at ``temperature``, one or one per row: the one each was sampled at),
        and the mask of real tokens; both ``[B, longest response]``.  Differentiable."""
        return self._score(prompts, responses, temperature)


class CausalPolicy(FunctionScorer, ABC):
    """A trainable causal LM ``lm`` over an engine's tokens (see the module docstring).

    A subclass sets ``lm`` and says what its states are (:meth:`state`, :meth:`load`) and how its
    reference scores (:meth:`_reference_logprobs`).
    """

    lm: Any

    def __init__(self, engine: Any) -> None:
        super().__init__(self._own_logprobs)
        self.pad = int(engine.pad)
        self.eos = set(engine.eos)

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        return (p for p in self.lm.parameters() if p.requires_grad)

    def train(self, mode: bool = True) -> CausalPolicy:
        return self  # eval mode throughout, no dropout: the step sees the function that served

    def eval(self) -> CausalPolicy:
        return self

    @abstractmethod
    def state(self) -> dict[str, Tensor]:
        """A copy of the trained weights (an adapter's, or every one)."""

    @abstractmethod
    def load(self, state: State | None) -> None:
        """Set the trained weights in place (``None``: where training from the base starts)."""

    def reference(self) -> FunctionScorer:
        """The model the KL term keeps the policy near (the base)."""
        return FunctionScorer(self._reference_logprobs)

    def view(self, state: State | None) -> FunctionScorer:
        """The policy with ``state`` loaded before each use (``None``: the reference), for the checks."""
        return FunctionScorer(functools.partial(self._view_logprobs, state))

    def greedy(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int) -> list[list[int]]:
        """Greedy answers to ``prompts`` under the current state (what the collapse check reads)."""
        return greedy_answers(self.lm, self.pad, self.eos, prompts, max_new_tokens)

    def _own_logprobs(self, prompts: TokenRows, responses: TokenRows, temperature: Temperature) -> LogProbs:
        return causal_logprobs(self.lm, self.pad, prompts, responses, temperature)

    @abstractmethod
    def _reference_logprobs(
        self, prompts: TokenRows, responses: TokenRows, temperature: Temperature
    ) -> LogProbs:
        """Log-probs under the reference, as :meth:`sequence_logprobs` gives the policy's."""

    def _view_logprobs(
        self, state: State | None, prompts: TokenRows, responses: TokenRows, temperature: Temperature
    ) -> LogProbs:
        if state is None:
            return self._reference_logprobs(prompts, responses, temperature)
        self.load(state)
        return self._own_logprobs(prompts, responses, temperature)


def tensors_digest(state: State) -> str:
    """16 hex digits of sha256 over the tensors' names and values."""
    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode() + state[name].detach().contiguous().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def causal_logprobs(
    model: Any, pad: int, prompts: TokenRows, responses: TokenRows, temperature: Temperature = 1.0
) -> LogProbs:
    """``(log-probs, mask)`` of each response token under ``model`` (a causal LM), given its
    prompt and the tokens before it, at each row's temperature; ``[B, longest response]``.
    Differentiable.

    The vocabulary's logits are computed only at the positions that predict a response token
    (``logits_to_keep``, a boolean mask): on SmolLM2 (49,152 tokens) the logits of a 64-token row
    take 12.6 MB, of which the 24 answer positions need 4.7."""
    rows = [[*p, *r] for p, r in zip(prompts, responses, strict=True)]
    width, longest = max(len(r) for r in rows), max((len(r) for r in responses), default=0)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    keep = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, (row, prompt) in enumerate(zip(rows, prompts, strict=True)):
        ids[i, : len(row)] = torch.tensor(row)  # right-padded: positions count from each row's start
        attention[i, : len(row)] = 1
        keep[i, len(prompt) - 1 : len(row) - 1] = True  # the positions that predict an answer token
    device = next(model.parameters()).device
    logp = torch.zeros((len(rows), longest), device=device)
    mask = torch.zeros((len(rows), longest), device=device)
    if not longest:
        return logp, mask
    # [answer tokens of every row, vocabulary], row after row
    logits = model(
        input_ids=ids.to(device), attention_mask=attention.to(device), logits_to_keep=keep.to(device)
    ).logits
    at = 0
    for i, response in enumerate(responses):
        n = len(response)
        if not n:
            continue
        t = temperature if isinstance(temperature, (int, float)) else temperature[i]
        scores = torch.log_softmax(logits[at : at + n].float() / t, dim=-1)
        target = torch.tensor(response, device=device).unsqueeze(1)
        logp[i, :n] = scores.gather(1, target).squeeze(1)
        mask[i, :n] = 1.0
        at += n
    return logp, mask


@torch.no_grad()
def greedy_answers(
    model: Any, pad: int, eos: set[int], prompts: Sequence[Sequence[int]], max_new_tokens: int
) -> list[list[int]]:
    """Greedy answers of ``model`` to ``prompts`` (token ids, up to an end-of-turn token)."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    attention = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, prompt in enumerate(prompts):  # left-padded, as generate wants
        ids[i, width - len(prompt) :] = torch.tensor(list(prompt))
        attention[i, width - len(prompt) :] = 1
    out = model.generate(
        input_ids=ids,
        attention_mask=attention,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=pad,
    )
    answers = []
    for row in out[:, width:].tolist():
        answer = []
        for token in row:
            if token in eos:
                break
            answer.append(int(token))
        answers.append(answer)
    return answers
