"""TinyLM: the byte-level GPT reef can serve and train on a CPU.

A plain-torch decoder: learned token and position embeddings, pre-LayerNorm blocks with SDPA
attention and a GELU MLP, a final LayerNorm, and a head tied to the token embedding.  With
the default ``TinyConfig`` it has 0.86M parameters, learns the synthetic corpus in about a
minute on two cores and samples ~2k tokens/s at batch 1 (``reference/weights.md`` §4).

This module owns the forward pass, KV-cache sampling (``generate``), and the recomputation of
response log-probs for training (``sequence_logprobs``).  Both of the latter see the same
logits: ``BOS`` and ``PAD`` are masked out of every distribution (the model must never emit
them), so a sampled token's behaviour log-prob and its recomputed log-prob agree.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from reef_core.errors import InvalidInput
from reef_core.models.tiny.tokenizer import BOS, EOS, PAD, VOCAB_SIZE

__all__ = ["Generation", "TinyConfig", "TinyLM"]

# A large finite value rather than -inf: exp() still gives exactly 0, and p*log(p) terms in
# a KL or an entropy stay 0 instead of becoming NaN.
_BANNED = -1e9


def _gelu(x: Tensor) -> Tensor:
    # the tanh form: about 3x cheaper than erf on CPU at these sizes, and as good for a model
    # trained with it
    return F.gelu(x, approximate="tanh")


#: one KV cache entry per layer: keys and values, each [B, heads, slots, head_dim]
_Cache = tuple[Tensor, Tensor]


@dataclass(frozen=True)
class TinyConfig:
    """The shape of a TinyLM.  ``max_len`` is the context length (prompt plus reply)."""

    vocab_size: int = VOCAB_SIZE
    d_model: int = 128
    n_layer: int = 4
    n_head: int = 4
    max_len: int = 256

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"{f.name} must be a positive integer", field=f.name)
        if self.vocab_size < VOCAB_SIZE:
            raise InvalidInput(f"vocab_size must be at least {VOCAB_SIZE}", field="vocab_size")
        if self.d_model % self.n_head:
            raise InvalidInput("d_model must be a multiple of n_head", field="n_head")

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TinyConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        for key in data:
            if key not in known:
                raise InvalidInput(f"unknown TinyConfig key {key!r}", field=str(key))
        return cls(**data)


@dataclass(frozen=True)
class Generation:
    """One sampled reply.

    ``logprobs[i]`` is the log-probability of ``tokens[i]`` under the distribution it was
    actually drawn from, i.e. after temperature scaling (the behaviour policy that PPO-style
    ratios need).  At temperature 0 decoding is greedy and every log-prob is 0.0: the sampling
    distribution is a point mass.  ``EOS`` is never in ``tokens``; when the reply ended with it
    (``finish_reason == "stop"``) ``stop_logprob`` is its log-prob, so a trainer can append
    ``EOS`` to the response and also learn when to stop.  ``"length"`` means the row ran into
    ``max_new_tokens`` or the end of the context.
    """

    tokens: list[int]
    logprobs: list[float]
    finish_reason: str
    stop_logprob: float | None = None


class _Block(nn.Module):
    """Pre-LN transformer block; with a cache it writes its keys/values at ``start``."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        d = config.d_model
        self.n_head = config.n_head
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x: Tensor, mask: Tensor | None, cache: _Cache | None, start: int) -> Tensor:
        b, t, d = x.shape
        # [B, T, 3, H, hd] -> 3 x [B, H, T, hd] in one permute instead of three transposes
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.n_head, -1).permute(2, 0, 3, 1, 4).unbind(0)
        if cache is not None:
            keys, values = cache
            keys[:, :, start : start + t] = k
            values[:, :, start : start + t] = v
            k, v = keys[:, :, : start + t], values[:, :, : start + t]
        # is_causal aligns the triangle top-left, which is right only when the queries start
        # at slot 0 (training and the prefill); decoding goes through TinyLM._step instead
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None and t > 1)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(_gelu(self.fc(self.ln2(x))))

    def step(self, x: Tensor, mask: Tensor | None, cache: _Cache, slot: int) -> Tensor:
        """``forward`` for one new token per row, on 2-D ``[B, d]`` activations.

        Sampling runs this 64 times per reply at batch 1, where the cost is per-op overhead,
        not arithmetic: 2-D inputs take the plain GEMM path (3-D ones reshape first), the
        attention output needs no transpose, and calling the functional ops directly skips
        ``nn.Module.__call__``.  Same weights, same math as ``forward``.
        """
        b, d = x.shape
        ln1, qkv, proj, ln2, fc, out = self.ln1, self.qkv, self.proj, self.ln2, self.fc, self.out
        h = F.layer_norm(x, (d,), ln1.weight, ln1.bias, ln1.eps)
        q, k, v = F.linear(h, qkv.weight, qkv.bias).view(b, 3, self.n_head, -1).unbind(1)
        keys, values = cache
        keys[:, :, slot] = k  # [B, H, hd] into slot `slot`
        values[:, :, slot] = v
        y = F.scaled_dot_product_attention(
            q[:, :, None], keys[:, :, : slot + 1], values[:, :, : slot + 1], attn_mask=mask
        )
        x = x + F.linear(y.view(b, d), proj.weight, proj.bias)
        h = F.layer_norm(x, (d,), ln2.weight, ln2.bias, ln2.eps)
        return x + F.linear(_gelu(F.linear(h, fc.weight, fc.bias)), out.weight, out.bias)


class TinyLM(nn.Module):
    """The model.  Callers choose ``train()``/``eval()``; there is no dropout either way."""

    banned: Tensor  # [V] added to every logit row: -1e9 at BOS and PAD, 0 elsewhere

    def __init__(self, config: TinyConfig | None = None) -> None:
        super().__init__()
        self.config = config = config or TinyConfig()
        self.tok = nn.Embedding(config.vocab_size, config.d_model)
        self.pos = nn.Embedding(config.max_len, config.d_model)
        self.blocks = nn.ModuleList(_Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.d_model)
        banned = torch.zeros(config.vocab_size)
        banned[[BOS, PAD]] = _BANNED
        self.register_buffer("banned", banned, persistent=False)
        self._init_weights()

    def _init_weights(self) -> None:
        # GPT-2 style: small normal weights, residual outputs scaled down by depth so the
        # residual stream does not grow with the number of layers
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        for block in self._layers():
            for layer in (block.proj, block.out):
                nn.init.normal_(layer.weight, std=0.02 / math.sqrt(2 * self.config.n_layer))

    def _layers(self) -> list[_Block]:
        return cast(list[_Block], list(self.blocks))

    def num_parameters(self) -> int:
        """Trainable parameters, the tied head counted once."""
        return sum(p.numel() for p in self.parameters())

    def _logits(
        self,
        ids: Tensor,
        positions: Tensor,
        mask: Tensor | None = None,
        caches: list[_Cache] | None = None,
        start: int = 0,
    ) -> Tensor:
        x = self.tok(ids) + self.pos(positions)
        for i, block in enumerate(self._layers()):
            x = block(x, mask, None if caches is None else caches[i], start)
        return F.linear(self.ln_f(x), self.tok.weight) + self.banned

    def _step_logits(
        self, ids: Tensor, positions: Tensor, mask: Tensor | None, caches: list[_Cache], slot: int
    ) -> Tensor:
        """Logits ``[B, V]`` for one new token per row (``ids``, ``positions``: ``[B]``)."""
        x = self.tok(ids) + self.pos(positions)
        for block, cache in zip(self._layers(), caches, strict=True):
            x = block.step(x, mask, cache, slot)
        return F.linear(self.ln_f(x), self.tok.weight) + self.banned

    def forward(self, ids: Tensor, positions: Tensor | None = None, mask: Tensor | None = None) -> Tensor:
        """Logits ``[B, T, V]`` for ``ids`` ``[B, T]``.

        By default row positions are ``0..T-1`` and attention is causal.  Pretraining packs
        several dialogues into a row: it passes each token's offset from its dialogue's
        ``BOS`` as ``positions`` and a boolean ``mask`` ``[B, 1, T, T]`` (True = may attend)
        that keeps dialogues apart, so every dialogue looks as it will at serving time.
        """
        if ids.dim() != 2 or ids.shape[1] > self.config.max_len:
            raise InvalidInput(f"ids must be [B, T] with T <= {self.config.max_len}", field="ids")
        if positions is None:
            positions = torch.arange(ids.shape[1], device=ids.device)
        return self._logits(ids, positions, mask)

    def _check(self, rows: Sequence[Sequence[int]], field: str, *, nonempty: bool) -> None:
        if not isinstance(rows, Sequence):
            raise InvalidInput("expected a list of token lists", field=field)
        vocab = self.config.vocab_size
        for i, row in enumerate(rows):
            if nonempty and not row:
                raise InvalidInput("a prompt needs at least one token (BOS)", field=f"{field}[{i}]")
            if not all(type(t) is int and 0 <= t < vocab for t in row):
                raise InvalidInput(f"token ids must be ints in [0, {vocab})", field=f"{field}[{i}]")

    @staticmethod
    def _temperature(temperature: float, *, allow_zero: bool) -> float:
        t = float(temperature)
        if not math.isfinite(t) or t < 0 or (t == 0 and not allow_zero):
            raise InvalidInput("temperature must be a finite number > 0 (0 = greedy)", field="temperature")
        return t

    # inference_mode rather than no_grad: it also skips version counting, ~15% faster at
    # batch 1; nothing it creates (the KV cache) outlives the call
    @torch.inference_mode()
    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int = 64,
        temperature: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> list[Generation]:
        """Sample a reply for each prompt, batched, with a KV cache.

        Prompts are left-padded to a common length; each row gets its own positions (its
        first real token is position 0) and padded slots are masked out of attention, so a
        row's distribution does not depend on its batch mates.  A row stops at ``EOS`` or
        after ``min(max_new_tokens, max_len - len(prompt))`` tokens.  All rows draw from
        ``generator`` (or torch's global one), so a batch is reproducible for a seed, though
        a row's sample is not the one it would draw alone.
        """
        self._check(prompts, "prompts", nonempty=True)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise InvalidInput("max_new_tokens must be a non-negative integer", field="max_new_tokens")
        temp = self._temperature(temperature, allow_zero=True)
        cfg = self.config
        lengths = [len(p) for p in prompts]
        if any(n > cfg.max_len for n in lengths):
            raise InvalidInput(f"a prompt is longer than the context ({cfg.max_len})", field="prompts")
        budgets = [min(max_new_tokens, cfg.max_len - n) for n in lengths]
        steps = max(budgets, default=0)
        if steps == 0:
            return [Generation([], [], "length") for _ in prompts]

        device = self.tok.weight.device
        b, width = len(prompts), max(lengths)
        pads = torch.tensor([width - n for n in lengths], device=device)
        ids = torch.full((b, width), PAD, dtype=torch.long, device=device)
        for i, prompt in enumerate(prompts):
            ids[i, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        slots = width + steps - 1  # the last sampled token is never fed back
        head_dim = cfg.d_model // cfg.n_head
        caches = [
            (
                torch.empty(b, cfg.n_head, slots, head_dim, device=device),
                torch.empty(b, cfg.n_head, slots, head_dim, device=device),
            )
            for _ in self.blocks
        ]
        ragged = bool(pads.any())
        mask = visible = None
        if ragged:
            visible = torch.arange(slots, device=device)[None, :] >= pads[:, None]  # [B, slots]
            causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
            # a padded query sees itself, so its softmax row is never empty (NaN); nothing reads it
            mask = (causal & visible[:, None, :width]) | torch.eye(width, dtype=torch.bool, device=device)
            mask = mask[:, None]
        positions = (torch.arange(width, device=device)[None, :] - pads[:, None]).clamp(min=0)
        logits = self._logits(ids, positions, mask, caches, 0)[:, -1]

        tokens: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        finish: list[str | None] = ["length" if budget == 0 else None for budget in budgets]
        stops: list[float | None] = [None] * b
        next_pos = torch.tensor(lengths, device=device)
        for step in range(steps):
            chosen, chosen_lp = self._sample(logits, temp, generator)
            for i, (tok, lp) in enumerate(zip(chosen.tolist(), chosen_lp.tolist(), strict=True)):
                if finish[i] is not None:
                    continue
                if tok == EOS:
                    finish[i], stops[i] = "stop", lp
                    continue
                tokens[i].append(tok)
                logprobs[i].append(lp)
                if len(tokens[i]) >= budgets[i]:
                    finish[i] = "length"
            if all(finish) or step == steps - 1:
                break
            # finished rows keep decoding (cheaper than reshaping the cache); their positions
            # are clamped so that a row past its context end cannot index out of the table
            pos = (next_pos + step).clamp(max=cfg.max_len - 1)
            step_mask = None if visible is None else visible[:, None, None, : width + step + 1]
            logits = self._step_logits(chosen, pos, step_mask, caches, width + step)
        return [Generation(tokens[i], logprobs[i], finish[i] or "length", stops[i]) for i in range(b)]

    @staticmethod
    def _sample(
        logits: Tensor, temperature: float, generator: torch.Generator | None
    ) -> tuple[Tensor, Tensor]:
        if temperature == 0:
            return logits.argmax(dim=-1), torch.zeros(logits.shape[0], device=logits.device)
        logp = torch.log_softmax(logits / temperature, dim=-1)
        chosen = torch.multinomial(logp.exp(), 1, generator=generator)
        return chosen[:, 0], logp.gather(1, chosen)[:, 0]

    def sequence_logprobs(
        self,
        prompts: list[list[int]],
        responses: list[list[int]],
        *,
        temperature: float | Sequence[float] = 1.0,
    ) -> tuple[Tensor, Tensor]:
        """Log-probs of each response token given its prompt and the tokens before it.

        Returns ``(logprobs, mask)``, both ``[B, Lmax]`` float with ``Lmax`` the longest
        response; padding is 0 in both.  Differentiable (no ``no_grad`` here): this is what a
        policy-gradient loss is built from.  ``temperature`` (one, or one per row) must match
        the sampling one for ratios against ``Generation.logprobs`` to be 1 on-policy.
        """
        self._check(prompts, "prompts", nonempty=True)
        self._check(responses, "responses", nonempty=False)
        if len(prompts) != len(responses):
            raise InvalidInput("prompts and responses differ in length", field="responses")
        device = self.tok.weight.device
        if isinstance(temperature, (int, float)):
            temp: float | Tensor = self._temperature(temperature, allow_zero=False)
        else:
            if len(temperature) != len(prompts):
                raise InvalidInput("one temperature per row", field="temperature")
            temp = torch.tensor(
                [self._temperature(t, allow_zero=False) for t in temperature], device=device
            ).view(-1, 1, 1)
        longest = max((len(r) for r in responses), default=0)
        if longest == 0:
            empty = torch.zeros(len(prompts), 0, device=device)
            return empty, empty.clone()
        rows = [[*p, *r] for p, r in zip(prompts, responses, strict=True)]
        if max(len(r) for r in rows) > self.config.max_len:
            raise InvalidInput(
                f"prompt + response exceeds the context ({self.config.max_len})", field="responses"
            )
        # right padding: causal attention never looks right, so pads cannot change real rows
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), PAD, dtype=torch.long, device=device)
        targets = torch.zeros(len(rows), longest, dtype=torch.long, device=device)
        where = torch.zeros(len(rows), longest, dtype=torch.long, device=device)
        mask = torch.zeros(len(rows), longest, device=device)
        for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
            ids[i, : len(rows[i])] = torch.tensor(rows[i], dtype=torch.long)
            if r:
                targets[i, : len(r)] = torch.tensor(r, dtype=torch.long)
                # response token k is predicted from the logits at prompt position len(p)-1+k
                where[i, : len(r)] = torch.arange(len(p) - 1, len(p) - 1 + len(r))
                mask[i, : len(r)] = 1.0
        logp = torch.log_softmax(self(ids) / temp, dim=-1)
        batch = torch.arange(len(rows), device=device)[:, None]
        return logp[batch, where, targets] * mask, mask
