"""SAO's critic on a CPU: a value head on the frozen base model's hidden states.

The paper trains a value model of its own beside the policy (colocated on its GPUs) and takes
the policy's advantages from its values.  Here the value model is the served base model, frozen,
with a linear value head over its last hidden state, the one part that trains: the base already
reads the prompt and the answer so far, and a head of ``hidden + 1`` numbers (577 on SmolLM2) is
cheap to fit, to store with each release and to load back.  (The original reef freezes an MoE
critic's attention and trains the rest; this critic freezes all but the head.)

Values are read at the positions that predict each answer token: ``V(s_t)``, the state after the
prompt and the answer's first ``t`` tokens.  Features are the hidden states scaled to unit length
(SmolLM2's run to a length of 40-60, one dimension alone to 50), so one learning rate suits any
model.  The head starts at zero (``V = 0`` everywhere), as the paper's value head does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from recipes.grpo.lora import LoraPolicy

__all__ = ["ValueHead", "answer_features"]


@torch.no_grad()
def answer_features(policy: LoraPolicy, prompt: Sequence[int], response: Sequence[int]) -> Tensor:
    """``[len(response), hidden]``: the base model's last hidden state (the adapter disabled) at
    each position that predicts an answer token, scaled to unit length."""
    ids = torch.tensor([[*prompt, *response]], dtype=torch.long)
    with policy.peft.disable_adapter():
        hidden = policy.lm.get_decoder()(input_ids=ids).last_hidden_state[0]
    start = len(prompt) - 1
    states = hidden[start : start + len(response)].float()
    return torch.nn.functional.normalize(states, dim=-1)


class ValueHead:
    """``V(s) = w · f(s) + b``, trained by mean squared error towards the returns."""

    def __init__(self, hidden: int, *, lr: float) -> None:
        self.weight = torch.nn.Parameter(torch.zeros(hidden))
        self.bias = torch.nn.Parameter(torch.zeros(1))
        self.optimizer = torch.optim.Adam([self.weight, self.bias], lr=lr)

    def state(self) -> dict[str, Tensor]:
        return {
            "value_head.weight": self.weight.detach().clone(),
            "value_head.bias": self.bias.detach().clone(),
        }

    def load(self, state: Mapping[str, Tensor] | None) -> None:
        """Set the head's numbers in place (``None``: zero, an untrained head); the optimizer
        keeps its hold on them."""
        with torch.no_grad():
            if state is None:
                self.weight.zero_()
                self.bias.zero_()
            else:
                self.weight.copy_(state["value_head.weight"])
                self.bias.copy_(state["value_head.bias"])

    def untrained(self) -> bool:
        """Every value is zero: the head has learned nothing yet."""
        return not bool(self.weight.any()) and not bool(self.bias.any())

    @torch.no_grad()
    def values(self, features: Tensor) -> Tensor:
        return features @ self.weight + self.bias

    def fit(self, features: Tensor, returns: Tensor, steps: int) -> float:
        """``steps`` updates towards ``returns``; the squared error before the first."""
        first = 0.0
        for step in range(steps):
            self.optimizer.zero_grad()
            loss = ((features @ self.weight + self.bias - returns) ** 2).mean()
            loss.backward()
            self.optimizer.step()
            if step == 0:
                first = float(loss.detach())
        return first
