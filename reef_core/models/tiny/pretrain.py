"""Pretraining TinyLM on the synthetic corpus, and the on-disk cache of the result.

``pretrain`` runs AdamW with a short linear warmup and a cosine decay over the budget (wall
seconds or steps, whichever ends first); the last 5% of dialogues are held out to measure
it, one padded dialogue per row, exactly as prompts look at serving time.

Training packs the dialogues, each ``[BOS] dialogue [EOS]``, into one stream and samples
random windows from it, so no step is spent on padding.  A window can start mid-dialogue and
span two; each token still gets the position it would have at serving time (its offset from
its dialogue's ``BOS``) and attends only within its own dialogue.  At equal steps this beat
whole padded dialogues per row, and unmasked windows, by a wide margin (held-out loss 0.65
vs 0.85-1.0 after 300 steps of 2048 tokens).

Determinism: the init is seeded (``torch.manual_seed`` inside a forked RNG, so the caller's
stream is untouched) and batches come from a seeded ``torch.Generator``.  With ``seconds=None``
and ``max_steps`` the run is reproducible; a wall-clock budget is not, since the number of
steps (and the learning-rate curve, which follows elapsed time) depends on the machine.

``ensure_pretrained`` keeps one checkpoint per (config, budget, seed, corpus version) under
a cache directory, trained on first use only, never downloaded.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from reef_core.errors import ConfigError, InvalidInput, StoreError
from reef_core.models.tiny.checkpoint import FORMAT, save
from reef_core.models.tiny.corpus import CORPUS_VERSION, build_corpus, split_dialogues
from reef_core.models.tiny.model import TinyConfig, TinyLM
from reef_core.models.tiny.tokenizer import BOS, EOS, PAD, encode

__all__ = [
    "PRETRAIN_SECONDS_ENV",
    "PretrainReport",
    "default_pretrain_seconds",
    "ensure_pretrained",
    "heldout_loss",
    "pretrain",
]

PRETRAIN_SECONDS_ENV = "REEF_TINY_PRETRAIN_SECONDS"
_HELDOUT_FRACTION = 0.05
_WARMUP_STEPS = 20
_FINAL_LR_FRACTION = 0.1
_EVAL_BATCH = 32
#: bump whenever pretraining changes in a way that changes its result: part of the cache key
_RECIPE = 3
#: the steps a second of budget buys: ``ensure_pretrained`` trains ``seconds`` x this many steps,
#: the rate of a quiet 2-core machine (measured: 106 steps in 10 s).  A wall-clock budget gave
#: a model that depended on the load: 600 steps and a held-out loss near 0.35 when quiet, 88
#: steps and 1.57 (a model that never says anything the tests can teach) beside other work.
STEPS_PER_SECOND = 10
_IGNORE = -100  # cross_entropy's ignore_index: padding is never a target


@dataclass(frozen=True)
class PretrainReport:
    """What a pretraining run did.  Losses are mean nats per byte (per token)."""

    steps: int
    seconds: float
    train_loss: float
    heldout_loss: float
    untrained_heldout_loss: float
    parameters: int


def _table(dialogues: list[str], max_len: int) -> tuple[Tensor, Tensor]:
    """All dialogues as one PAD-filled ``[N, longest]`` id table, plus each row's length."""
    rows = [[BOS, *encode(d), EOS][:max_len] for d in dialogues]
    lengths = torch.tensor([len(r) for r in rows])
    table = torch.full((len(rows), int(lengths.max())), PAD, dtype=torch.long)
    for i, row in enumerate(rows):
        table[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return table, lengths


def _loss(model: TinyLM, rows: Tensor, lengths: Tensor) -> tuple[Tensor, int]:
    """Mean next-token loss of a batch of table rows, and how many targets it covered."""
    width = int(lengths.max())
    inputs, targets = rows[:, : width - 1], rows[:, 1:width].clone()
    targets[targets == PAD] = _IGNORE
    logits = model(inputs)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=_IGNORE)
    return loss, int((targets != _IGNORE).sum())


@dataclass(frozen=True)
class _Packed:
    """The training dialogues as one stream of ``[BOS] dialogue [EOS]`` ids."""

    ids: Tensor  # [N]
    positions: Tensor  # [N]: offset from the dialogue's BOS, as at serving time
    dialogue: Tensor  # [N]: index of the dialogue each id belongs to

    @classmethod
    def of(cls, dialogues: list[str], max_len: int) -> _Packed:
        # vectorised: a per-token Python loop over ~650k bytes costs most of a second
        encoded = [d.encode("utf-8") for d in dialogues]
        sizes = torch.tensor([len(e) + 2 for e in encoded])
        starts = torch.cumsum(sizes, 0) - sizes
        owner = torch.repeat_interleave(torch.arange(len(encoded)), sizes)
        ids = torch.full((int(sizes.sum()),), EOS, dtype=torch.long)
        is_byte = torch.ones_like(ids, dtype=torch.bool)
        is_byte[starts] = False
        is_byte[starts + sizes - 1] = False
        ids[is_byte] = torch.frombuffer(bytearray(b"".join(encoded)), dtype=torch.uint8).long()
        ids[starts] = BOS
        positions = (torch.arange(len(ids)) - starts[owner]).clamp(max=max_len - 1)
        return cls(ids, positions, owner)

    def windows(self, starts: Tensor, length: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Inputs, targets, positions and attention mask for windows at ``starts``."""
        index = starts[:, None] + torch.arange(length + 1)
        ids = self.ids[index]
        inputs, targets = ids[:, :-1], ids[:, 1:].clone()
        targets[targets == BOS] = _IGNORE  # the next dialogue's start is not predictable
        owner = self.dialogue[index[:, :-1]]
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        mask = (owner[:, :, None] == owner[:, None, :]) & causal
        return inputs, targets, self.positions[index[:, :-1]], mask[:, None]


def heldout_loss(model: TinyLM, text: str, *, max_batches: int = 8) -> float:
    """Mean loss (nats/byte) over the first ``max_batches`` × 32 dialogues of ``text``."""
    dialogues = split_dialogues(text)[: max_batches * _EVAL_BATCH]
    if not dialogues:
        raise InvalidInput("no dialogues in the held-out text", field="text")
    # batching similar lengths wastes less on padding; the token-weighted mean is unchanged
    dialogues.sort(key=len)
    table, lengths = _table(dialogues, model.config.max_len)
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        with torch.no_grad():
            for start in range(0, len(dialogues), _EVAL_BATCH):
                loss, n = _loss(
                    model, table[start : start + _EVAL_BATCH], lengths[start : start + _EVAL_BATCH]
                )
                total, count = total + float(loss) * n, count + n
    finally:
        model.train(was_training)
    return total / count


def _lr_scale(step: int, progress: float) -> float:
    warmup = min(1.0, (step + 1) / _WARMUP_STEPS)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
    return warmup * (_FINAL_LR_FRACTION + (1.0 - _FINAL_LR_FRACTION) * cosine)


def pretrain(
    config: TinyConfig = TinyConfig(),
    *,
    seconds: float | None = 60.0,
    max_steps: int | None = None,
    seed: int = 0,
    batch_size: int = 32,
    seq_len: int = 64,
    lr: float = 3e-3,
    log: Callable[[str], None] | None = None,
) -> tuple[TinyLM, PretrainReport]:
    """Train a fresh TinyLM on ``build_corpus(seed)``; returns it in eval mode and a report.

    Each step sees ``batch_size`` windows of ``seq_len`` tokens (2048 by default: many small
    steps learn faster in a fixed wall-clock budget than few large ones).  Stops after
    ``seconds`` of training or ``max_steps`` steps, whichever comes first (at least one must
    be given).  ``report.seconds`` counts the training loop only.
    """
    if seconds is None and max_steps is None:
        raise InvalidInput("give a time budget, a step budget or both", field="seconds")
    if seconds is not None and not (isinstance(seconds, int | float) and seconds > 0):
        raise InvalidInput("seconds must be a positive number", field="seconds")
    if max_steps is not None and (not isinstance(max_steps, int) or max_steps < 1):
        raise InvalidInput("max_steps must be a positive integer", field="max_steps")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInput("batch_size must be a positive integer", field="batch_size")
    if not isinstance(seq_len, int) or not 2 <= seq_len <= config.max_len:
        raise InvalidInput(f"seq_len must be an integer in [2, {config.max_len}]", field="seq_len")
    if not lr > 0:
        raise InvalidInput("lr must be positive", field="lr")

    dialogues = split_dialogues(build_corpus(seed))
    cut = len(dialogues) - max(1, int(len(dialogues) * _HELDOUT_FRACTION))
    heldout_text = "\n\n".join(dialogues[cut:])
    packed = _Packed.of(dialogues[:cut], config.max_len)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = TinyLM(config)
    untrained = heldout_loss(model, heldout_text)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    model.train()
    recent: list[float] = []
    step, start = 0, time.perf_counter()
    while True:
        elapsed = time.perf_counter() - start
        progress = max(
            elapsed / seconds if seconds is not None else 0.0,
            step / max_steps if max_steps is not None else 0.0,
        )
        if progress >= 1.0:
            break
        for group in optimizer.param_groups:
            group["lr"] = lr * _lr_scale(step, progress)
        starts = torch.randint(len(packed.ids) - seq_len, (batch_size,), generator=generator)
        inputs, targets, positions, mask = packed.windows(starts, seq_len)
        logits = model(inputs, positions, mask)
        loss = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=_IGNORE
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        recent = [*recent[-19:], loss.item()]
        step += 1
        if log is not None and step % 100 == 0:
            log(f"tiny pretrain step {step} loss {recent[-1]:.3f} ({elapsed:.1f}s)")
    took = time.perf_counter() - start
    model.eval()
    report = PretrainReport(
        steps=step,
        seconds=took,
        train_loss=sum(recent) / len(recent) if recent else float("nan"),
        heldout_loss=heldout_loss(model, heldout_text),
        untrained_heldout_loss=untrained,
        parameters=model.num_parameters(),
    )
    if log is not None:
        log(
            f"tiny pretrain done: {step} steps in {took:.1f}s, train {report.train_loss:.3f}, "
            f"held-out {report.heldout_loss:.3f} (untrained {untrained:.3f}) nats/byte"
        )
    return model, report


def default_pretrain_seconds() -> float:
    """The pretraining budget: ``$REEF_TINY_PRETRAIN_SECONDS`` if set, else 60.

    The variable lets tests and CI choose a shorter budget (and so a different cache key)
    without touching code.  It is read when called, never at import.
    """
    raw = os.environ.get(PRETRAIN_SECONDS_ENV, "").strip()
    if not raw:
        return 60.0
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(
            f"{PRETRAIN_SECONDS_ENV} must be a positive number, got {raw!r}", field=PRETRAIN_SECONDS_ENV
        )
    return value


def _cache_name(config: TinyConfig, steps: int, seed: int) -> str:
    key = json.dumps(
        {
            "config": config.to_dict(),
            "steps": steps,
            "seed": seed,
            "corpus": CORPUS_VERSION,
            "format": FORMAT,
            "recipe": _RECIPE,
        },
        sort_keys=True,
    )
    return "tiny-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def ensure_pretrained(
    cache_dir: Path,
    *,
    seconds: float = 60.0,
    seed: int = 0,
    config: TinyConfig = TinyConfig(),
    log: Callable[[str], None] | None = None,
) -> Path:
    """The checkpoint directory for this budget, pretraining and saving it on first use.

    The budget is in steps, ``seconds`` x :data:`STEPS_PER_SECOND` (about ``seconds`` on a quiet
    2-core machine, longer on a slower or busier one), so the checkpoint is the same on every
    machine (``pretrain`` with a step budget is reproducible).

    The result appears by one ``rename`` of a finished temporary directory, so it is either
    absent or complete.  An ``fcntl`` lock per checkpoint makes a second process wait for the
    first one's run and then reuse it, instead of training twice.
    """
    if not (isinstance(seconds, int | float) and math.isfinite(seconds) and seconds > 0):
        raise InvalidInput("seconds must be a positive number", field="seconds")
    cache_dir = Path(cache_dir)
    steps = max(1, round(seconds * STEPS_PER_SECOND))
    name = _cache_name(config, steps, seed)
    final = cache_dir / name
    if final.is_dir():
        return final
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        with open(cache_dir / f".{name}.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, even on a crash
            if final.is_dir():  # another process finished while we waited
                return final
            for stale in cache_dir.glob(f".{name}.tmp-*"):  # left by a crashed run; we hold the lock
                shutil.rmtree(stale, ignore_errors=True)
            if log is not None:
                log(f"pretraining the tiny model for {steps} steps (about {seconds:g}s) into {final}")
            model, _ = pretrain(config, seconds=None, max_steps=steps, seed=seed, log=log)
            temp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=cache_dir))
            save(model, temp)
            os.rename(temp, final)
    except OSError as exc:
        raise StoreError(f"cannot prepare the tiny model cache in {cache_dir}: {exc}") from exc
    return final
