"""Local models reef can serve and train.

torch is imported only here (this package), by the local engine and by the grpo recipe; the
rest of reef_core stays importable without it.  ``reef_core.models.tiny`` is the embedded
CPU model: a byte-level GPT with its tokenizer, synthetic corpus, pretraining and
checkpoints.  This package itself imports nothing, so naming it costs no torch import.
"""

from __future__ import annotations

__all__: list[str] = []
