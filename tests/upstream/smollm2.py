"""SmolLM2-135M-Instruct (``builtin:smollm2``) for tests: resolved and loaded once per session,
its GGUF converted once per run into a model cache shared by the run's xdist workers and their
daemons (the first worker to need it converts, under a lock; the others then read it: a
conversion is about 20 s of CPU, a load from the cache 0.3 s).

A missing model is a failure, not a skip: ``scripts/setup.sh --dev`` installs it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any

import pytest

from reef_core.errors import ConfigError

__all__ = ["load_shared", "model_cache", "smollm2"]


def _source() -> Any:
    from reef_core.models import hf

    try:
        return hf.resolve(hf.BUILTIN_SMOLLM2)
    except ConfigError as exc:
        pytest.fail(f"{exc.message} (run scripts/setup.sh --dev)", pytrace=False)


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One model cache for the run: SmolLM2's GGUF is converted into it once."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # each worker's base temp is a folder of the run's
    cache = base / "model-cache"
    cache.mkdir(exist_ok=True)
    return cache


@pytest.fixture(scope="session")
def smollm2(model_cache: Path) -> tuple[Any, Any, Any]:
    """``(source, model, tokenizer)``."""

    source = _source()
    model, tokenizer = load_shared(source, model_cache)
    return source, model, tokenizer


def load_shared(source: Any, cache: Path) -> tuple[Any, Any]:
    """``hf.load`` into the run's shared ``cache``, under its lock: the first caller of the run
    converts, the others wait for it and then read the converted copy."""
    from reef_core.models import hf

    with (cache / "conversion.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        return hf.load(source, cache=cache)
