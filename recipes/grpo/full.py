"""All the weights of a ``transformers`` model trained: grpo with ``recipe.config.lora false``.

A :class:`FullPolicy` is a private, trainable copy of the engine's model; its reference (for
the KL term) is the base model, frozen, through :meth:`TransformersEngine.shared_copy
<reef_core.upstream.transformers_engine.TransformersEngine.shared_copy>` (the engine's own
tensors, never changed).  It answers what the grpo objective and checks ask of a policy, as
:class:`~recipes.grpo.lora.LoraPolicy` does, with whole ``state_dict`` s for states.  A release
of such a step holds every weight (SmolLM2-135M: about 0.65 GB in fp32), so LoRA stays the
default; this is for when an adapter cannot learn what is asked.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from recipes.grpo.lora import _View, causal_logprobs, greedy_answers, tensors_digest

__all__ = ["FullPolicy", "weights_digest"]


class FullPolicy:
    """A trainable copy of ``engine``'s whole model (see the module docstring)."""

    def __init__(self, engine: Any) -> None:
        self.model = copy.deepcopy(engine.model).eval().requires_grad_(True)
        self.base = engine.shared_copy()  # frozen: the engine's weights
        self.pad = int(engine.pad)
        self.eos = set(engine.eos)

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        return (p for p in self.model.parameters() if p.requires_grad)

    def train(self, mode: bool = True) -> FullPolicy:
        return self  # eval mode throughout: the step sees the function that served

    def eval(self) -> FullPolicy:
        return self

    def sequence_logprobs(
        self,
        prompts: list[list[int]],
        responses: list[list[int]],
        *,
        temperature: float | Sequence[float] = 1.0,
    ) -> tuple[Tensor, Tensor]:
        return causal_logprobs(self.model, self.pad, prompts, responses, temperature)

    def state(self) -> dict[str, Tensor]:
        """A copy of every weight (tied ones as separate copies: safetensors stores no aliases)."""
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def load(self, state: Mapping[str, Tensor] | None) -> None:
        """Set every weight (``None``: the base model's), in place."""
        self.model.load_state_dict(dict(state) if state is not None else self.base.state_dict())

    def reference(self) -> _Frozen:
        return _Frozen(self)

    def view(self, state: Mapping[str, Tensor] | None) -> _View:
        return _View(self, state)

    def greedy(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int) -> list[list[int]]:
        return greedy_answers(self.model, self.pad, self.eos, prompts, max_new_tokens)


class _Frozen:
    """The base model, as a scorer."""

    def __init__(self, policy: FullPolicy) -> None:
        self.policy = policy

    def sequence_logprobs(
        self,
        prompts: list[list[int]],
        responses: list[list[int]],
        *,
        temperature: float | Sequence[float] = 1.0,
    ) -> tuple[Tensor, Tensor]:
        with torch.no_grad():
            return causal_logprobs(self.policy.base, self.policy.pad, prompts, responses, temperature)


def weights_digest(state: Mapping[str, Tensor] | None) -> str:
    """A short digest of whole-model weights (``"base"`` for none)."""
    return "base" if state is None else tensors_digest(state)
