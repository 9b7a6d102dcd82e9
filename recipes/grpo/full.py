"""All the weights of a ``transformers`` model trained: grpo with ``recipe.config.lora false``.

A :class:`FullPolicy` is a private, trainable copy of the engine's model; its reference (for
the KL term) is the base model, frozen, through :meth:`TransformersEngine.shared_copy
<reef_core.upstream.transformers_engine.TransformersEngine.shared_copy>` (the engine's own
tensors, never changed).  What every policy answers is
:class:`~recipes.grpo.policy.CausalPolicy`'s; a full policy's states are whole ``state_dict`` s.  A release
of such a step holds every weight (SmolLM2-135M: about 0.65 GB in fp32), so LoRA stays the
default; this is for when an adapter cannot learn what is asked.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from recipes.grpo.objective import LogProbs, Temperature, TokenRows
from recipes.grpo.policy import CausalPolicy, causal_logprobs, tensors_digest

__all__ = ["FullPolicy", "weights_digest"]


class FullPolicy(CausalPolicy):
    """A trainable copy of ``engine``'s whole model (see the module docstring)."""

    def __init__(self, engine: Any) -> None:
        super().__init__(engine)
        self.lm = copy.deepcopy(engine.model).eval().requires_grad_(True)
        self.base = engine.shared_copy()  # frozen: the engine's weights

    def state(self) -> dict[str, Tensor]:
        """A copy of every weight (tied ones as separate copies: safetensors stores no aliases)."""
        return {k: v.detach().clone() for k, v in self.lm.state_dict().items()}

    def load(self, state: Mapping[str, Tensor] | None) -> None:
        """Set every weight (``None``: the base model's), in place."""
        self.lm.load_state_dict(dict(state) if state is not None else self.base.state_dict())

    def _reference_logprobs(
        self, prompts: TokenRows, responses: TokenRows, temperature: Temperature
    ) -> LogProbs:
        """The base model's, frozen."""
        with torch.no_grad():
            return causal_logprobs(self.base, self.pad, prompts, responses, temperature)


def weights_digest(state: Mapping[str, Tensor] | None) -> str:
    """A short digest of whole-model weights (``"base"`` for none)."""
    return "base" if state is None else tensors_digest(state)
