"""LoRA on a ``transformers`` model: the adapter policy the grpo objective trains.

A :class:`LoraPolicy` is one ``peft`` adapter on a shared copy of the engine's base model (the
base's weights are shared and frozen; only the adapter trains).  What every policy answers
(scoring, greedy answers, views) is :class:`~recipes.grpo.policy.CausalPolicy`'s; a LoRA policy
adds its states, the adapter's weights, and its reference: the same model with the adapter
disabled, the base, which the KL term keeps the policy near.  Adapter states use the names of
``adapter_model.safetensors``, the names the engine's
:meth:`~reef_core.upstream.transformers_engine.TransformersEngine.swap` takes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from recipes.grpo.objective import LogProbs, Temperature, TokenRows
from recipes.grpo.policy import CausalPolicy, tensors_digest
from reef_core.upstream.transformers_engine import LORA_DEFAULTS

__all__ = ["LoraPolicy", "LoraSettings", "state_digest"]

_NAME = "policy"


@dataclass(frozen=True)
class LoraSettings:
    rank: int = 16
    alpha: float = 32.0
    targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")

    def adapter_config(self, base: str = "") -> dict[str, Any]:
        """The adapter's ``adapter_config.json`` (what peft writes and reads)."""
        return {
            **LORA_DEFAULTS,
            "r": self.rank,
            "lora_alpha": self.alpha,
            "target_modules": sorted(self.targets),
            "task_type": "CAUSAL_LM",
            "base_model_name_or_path": base,
        }


class LoraPolicy(CausalPolicy):
    """A trainable LoRA adapter over ``engine``'s base model (see the module docstring)."""

    def __init__(self, engine: Any, settings: LoraSettings, *, seed: int = 0) -> None:
        from peft import LoraConfig, get_peft_model

        super().__init__(engine)
        config = settings.adapter_config()
        torch.manual_seed(seed)  # the adapter's initial A matrices
        lora = LoraConfig(
            r=config["r"],
            lora_alpha=config["lora_alpha"],
            lora_dropout=0.0,  # no dropout: recomputed log-probs match the served ones exactly
            target_modules=config["target_modules"],
            bias="none",
        )
        self.settings = settings
        self.peft = get_peft_model(engine.shared_copy(), lora, adapter_name=_NAME)
        self.peft.eval()
        self.lm = self.peft.base_model.model
        #: the untrained adapter (B = 0: the base model's answers), where training from the base starts
        self.initial = self.state()

    def state(self) -> dict[str, Tensor]:
        """A copy of the adapter's weights."""
        from peft import get_peft_model_state_dict

        state = get_peft_model_state_dict(self.peft, adapter_name=_NAME, save_embedding_layers=False)
        return {k: v.detach().clone() for k, v in state.items()}

    def load(self, state: Mapping[str, Tensor] | None) -> None:
        """Set the adapter's weights (``None``: the untrained adapter), in place (an optimizer
        keeps its hold on the parameters)."""
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(self.peft, dict(state or self.initial), adapter_name=_NAME)

    def _reference_logprobs(
        self, prompts: TokenRows, responses: TokenRows, temperature: Temperature
    ) -> LogProbs:
        """The base model's: the same forward with the adapter disabled."""
        with self.peft.disable_adapter():
            return self._own_logprobs(prompts, responses, temperature)


def state_digest(state: Mapping[str, Tensor] | None) -> str:
    """A short digest of an adapter state (``"base"`` for none, or one that changes nothing:
    every B matrix zero)."""
    if state is None or all(not bool(v.any()) for k, v in state.items() if "lora_B" in k):
        return "base"
    return tensors_digest(state)
