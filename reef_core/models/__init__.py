"""Local models reef can serve and train.

| module | owns |
|---|---|
| ``tiny`` | the embedded CPU model: a byte-level GPT, its tokenizer, corpus, pretraining, checkpoints |
| ``hf`` | Hugging Face causal LMs served in-process: which specs name one, where it is, how it loads |

torch is imported only here (this package), by the local engine and by the grpo recipe; the
rest of reef_core stays importable without it.  This package itself imports nothing, so naming
it costs no torch import.
May import: ``torch``, ``safetensors``, ``transformers``, ``gguf``, ``reef_core.errors``,
``reef_core.memory``.
"""

from __future__ import annotations

__all__: list[str] = []
