"""The embedded tiny model: a 0.86M-parameter byte-level GPT that runs and trains on a CPU.

| module | owns |
|---|---|
| ``tokenizer`` | bytes plus BOS/EOS/PAD, and the ``User: …`` / ``Bot:`` chat prompt format |
| ``model`` | ``TinyLM`` with KV-cache sampling and differentiable response log-probs |
| ``corpus`` | the deterministic synthetic chat corpus and the RL/eval prompts |
| ``pretrain`` | budgeted pretraining and the on-disk cache of pretrained checkpoints |
| ``checkpoint`` | safetensors + config.json directories, and weight fingerprints |

Measurements behind the design are in ``reference/weights.md`` §4.
May import: ``torch``, ``safetensors``, ``reef_core.errors``.
"""

from __future__ import annotations

from reef_core.models.tiny.checkpoint import FORMAT, load, load_state, save, state_fingerprint
from reef_core.models.tiny.corpus import (
    CORPUS_VERSION,
    OPENERS,
    build_corpus,
    heldout_prompts,
    split_dialogues,
    train_prompts,
)
from reef_core.models.tiny.model import Generation, TinyConfig, TinyLM
from reef_core.models.tiny.pretrain import (
    PretrainReport,
    default_pretrain_seconds,
    ensure_pretrained,
    heldout_loss,
    pretrain,
)
from reef_core.models.tiny.tokenizer import (
    BOS,
    EOS,
    PAD,
    VOCAB_SIZE,
    decode,
    encode,
    prompt_ids,
    render_chat,
)

__all__ = [
    "BOS",
    "CORPUS_VERSION",
    "EOS",
    "FORMAT",
    "OPENERS",
    "PAD",
    "VOCAB_SIZE",
    "Generation",
    "PretrainReport",
    "TinyConfig",
    "TinyLM",
    "build_corpus",
    "decode",
    "default_pretrain_seconds",
    "encode",
    "ensure_pretrained",
    "heldout_loss",
    "heldout_prompts",
    "load",
    "load_state",
    "pretrain",
    "prompt_ids",
    "render_chat",
    "save",
    "split_dialogues",
    "state_fingerprint",
    "train_prompts",
]
