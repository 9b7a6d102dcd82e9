"""LoRA on a ``transformers`` model: the policy the grpo objective trains, and its views.

A :class:`LoraPolicy` is one ``peft`` adapter on a shared copy of the engine's base model (the
base's weights are shared and frozen; only the adapter trains).  It answers what
:func:`~recipes.grpo.objective.policy_step` and :func:`~recipes.grpo.objective.estimate_reward`
ask of a policy (``sequence_logprobs``, ``parameters``, ``train``/``eval``); its
:meth:`~LoraPolicy.reference` is the same model with the adapter disabled, the base, which the KL
term keeps the policy near.  Adapter states use the names of ``adapter_model.safetensors``, the
names the engine's :meth:`~reef_core.upstream.transformers_engine.TransformersEngine.swap` takes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

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


class LoraPolicy:
    """A trainable LoRA adapter over ``engine``'s base model (see the module docstring)."""

    def __init__(self, engine: Any, settings: LoraSettings, *, seed: int = 0) -> None:
        from peft import LoraConfig, get_peft_model

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
        self.pad = int(engine.pad)
        self.eos = set(engine.eos)
        #: the untrained adapter (B = 0: the base model's answers), where training from the base starts
        self.initial = self.state()

    # -- what the objective asks of a policy -------------------------------------------------

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        return (p for p in self.peft.parameters() if p.requires_grad)

    def train(self, mode: bool = True) -> LoraPolicy:
        return self  # no dropout to switch on: the step sees the function that served

    def eval(self) -> LoraPolicy:
        return self

    def sequence_logprobs(
        self,
        prompts: list[list[int]],
        responses: list[list[int]],
        *,
        temperature: float | Sequence[float] = 1.0,
    ) -> tuple[Tensor, Tensor]:
        """Log-probs of each response token given its prompt and the tokens before it (under
        the distribution at ``temperature``, one or one per row: the one each was sampled at),
        and the mask of real tokens; both ``[B, longest response]``.  Differentiable."""
        return causal_logprobs(self.peft.base_model.model, self.pad, prompts, responses, temperature)

    # -- adapter states ----------------------------------------------------------------------

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

    def reference(self) -> _Base:
        """The base model (the adapter disabled), for the KL term."""
        return _Base(self)

    def view(self, state: Mapping[str, Tensor] | None) -> _View:
        """The policy with ``state`` as its adapter (``None``: the base), for the checks."""
        return _View(self, state)

    @torch.no_grad()
    def greedy(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int) -> list[list[int]]:
        """Greedy answers to ``prompts`` under the current adapter (what the collapse check reads)."""
        return greedy_answers(self.peft.base_model.model, self.pad, self.eos, prompts, max_new_tokens)


class _Base:
    """A policy's base model: the same forward with the adapter disabled."""

    def __init__(self, policy: LoraPolicy) -> None:
        self.policy = policy

    def sequence_logprobs(
        self,
        prompts: list[list[int]],
        responses: list[list[int]],
        *,
        temperature: float | Sequence[float] = 1.0,
    ) -> tuple[Tensor, Tensor]:
        with self.policy.peft.disable_adapter():
            return self.policy.sequence_logprobs(prompts, responses, temperature=temperature)


class _View:
    """A policy (LoRA, or :class:`~recipes.grpo.full.FullPolicy`) with a given state loaded
    before each use."""

    def __init__(self, policy: Any, state: Mapping[str, Tensor] | None) -> None:
        self.policy, self.state = policy, state

    def sequence_logprobs(
        self,
        prompts: list[list[int]],
        responses: list[list[int]],
        *,
        temperature: float | Sequence[float] = 1.0,
    ) -> tuple[Tensor, Tensor]:
        if self.state is None:
            return self.policy.reference().sequence_logprobs(prompts, responses, temperature=temperature)
        self.policy.load(self.state)
        return self.policy.sequence_logprobs(prompts, responses, temperature=temperature)


def state_digest(state: Mapping[str, Tensor] | None) -> str:
    """A short digest of an adapter state (``"base"`` for none, or one that changes nothing:
    every B matrix zero)."""
    if state is None or all(not bool(v.any()) for k, v in state.items() if "lora_B" in k):
        return "base"
    return tensors_digest(state)


def tensors_digest(state: Mapping[str, Tensor]) -> str:
    """16 hex digits of sha256 over the tensors' names and values."""
    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode() + state[name].detach().contiguous().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def causal_logprobs(
    model: Any,
    pad: int,
    prompts: list[list[int]],
    responses: list[list[int]],
    temperature: float | Sequence[float] = 1.0,
) -> tuple[Tensor, Tensor]:
    """``(log-probs, mask)`` of each response token under ``model`` (a causal LM), given its
    prompt and the tokens before it, at each row's temperature; ``[B, longest response]``.
    Differentiable."""
    rows = [[*p, *r] for p, r in zip(prompts, responses, strict=True)]
    width, longest = max(len(r) for r in rows), max((len(r) for r in responses), default=0)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):  # right-padded: positions count from each row's start
        ids[i, : len(row)] = torch.tensor(row)
        attention[i, : len(row)] = 1
    device = next(model.parameters()).device
    logits = model(input_ids=ids.to(device), attention_mask=attention.to(device)).logits
    logp = torch.zeros((len(rows), longest), device=device)
    mask = torch.zeros((len(rows), longest), device=device)
    for i, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        if not response:
            continue
        start, n = len(prompt) - 1, len(response)
        t = temperature if isinstance(temperature, (int, float)) else temperature[i]
        scores = torch.log_softmax(logits[i, start : start + n].float() / t, dim=-1)
        target = torch.tensor(response, device=device).unsqueeze(1)
        logp[i, :n] = scores.gather(1, target).squeeze(1)
        mask[i, :n] = 1.0
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
