"""SmolLM2-135M-Instruct (``builtin:smollm2``) for tests: resolved and loaded once per session,
its GGUF converted into a model cache shared by the session's daemons.

A missing model is a failure, not a skip: ``scripts/setup.sh --dev`` installs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reef_core.errors import ConfigError

__all__ = ["model_cache", "smollm2"]


def _source() -> Any:
    from reef_core.models import hf

    try:
        return hf.resolve(hf.BUILTIN_SMOLLM2)
    except ConfigError as exc:
        pytest.fail(f"{exc.message} (run scripts/setup.sh --dev)", pytrace=False)


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One model cache for the session: SmolLM2's GGUF is converted into it once."""
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(scope="session")
def smollm2(model_cache: Path) -> tuple[Any, Any, Any]:
    """``(source, model, tokenizer)``."""
    from reef_core.models import hf

    source = _source()
    model, tokenizer = hf.load(source, cache=model_cache)
    return source, model, tokenizer
