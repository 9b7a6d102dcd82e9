"""Which engine serves the daemon's model in-process, if any, and loading it.

``--inference.model-path`` chooses:

* ``builtin:tiny``, or no model path and no upstream configured: the embedded model
  (:class:`~reef_core.upstream.local.LocalEngine`), pretrained on first use into the model cache;
* a model the ``transformers`` backend serves (a model directory, a ``.gguf`` file, a Hugging
  Face model already in the local cache, ``builtin:smollm2``, or any path with
  ``--inference.backend transformers``):
  :class:`~reef_core.upstream.transformers_engine.TransformersEngine`;
* any other model path: a :class:`~reef_core.errors.ConfigError` naming it, before the daemon
  listens;
* no model path with an upstream configured: nothing in-process, the HTTP upstream answers.

The engines, torch and transformers are imported only when a model loads, so a daemon in front of
an HTTP upstream runs where none of them is installed.  Without torch, an explicit
``builtin:tiny`` is a ConfigError; the default one is a warning, and inference answers 502.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reef_core.config import Settings
from reef_core.errors import ConfigError
from reef_core.upstream.engine import Engine

__all__ = ["BUILTIN_TINY", "engine_loader"]

log = logging.getLogger("reef")  # the daemon's own log: these lines are part of its start

BUILTIN_TINY = "builtin:tiny"


def engine_loader(settings: Settings, cache_dir: Path) -> Callable[[], Engine[Any] | None] | None:
    """How to load the engine that serves in-process (to run off the event loop: it may pretrain
    or convert a model, and returns None for a default ``builtin:tiny`` without torch), or None
    when the HTTP upstream answers.  A ``transformers`` model is resolved here, so a missing or
    broken one is a ConfigError before the daemon listens."""
    path = settings.inference.model_path
    source = _transformers_source(settings, cache_dir)
    if source is not None:
        return functools.partial(_transformers_engine, source, cache_dir)
    if path == BUILTIN_TINY or not settings.inference.upstream_url:
        return functools.partial(_tiny_engine, cache_dir, asked=path == BUILTIN_TINY)
    return None


def _transformers_source(settings: Settings, cache: Path) -> Any:  # -> hf.ModelSource | None
    """The model ``--inference.model-path`` names for the ``transformers`` backend, resolved (a
    missing or broken one is a :class:`ConfigError` naming the path); None for ``builtin:tiny``
    and no model path.  The backend is chosen by the path (a model directory, a ``.gguf`` file, a
    Hugging Face cache name, ``builtin:smollm2``) or by ``--inference.backend transformers``."""
    from reef_core.models import hf

    path = settings.inference.model_path
    if path is None or path == BUILTIN_TINY:
        return None
    if settings.inference.backend != "transformers" and not hf.is_transformers_model(path):
        raise ConfigError(
            f"inference.model-path {path!r} is not a model reef can serve in-process: give a model "
            f"directory, a .gguf file, a Hugging Face model already in the local cache, "
            f"{hf.BUILTIN_SMOLLM2} or {BUILTIN_TINY} (reef never downloads a model)",
            field="inference.model_path",
        )
    return hf.resolve(path, cache=cache)


def _tiny_engine(cache_dir: Path, *, asked: bool) -> Engine[Any] | None:
    """Load (pretraining on first use) the embedded model, if torch is installed; without it,
    refuse when ``builtin:tiny`` was ``asked`` for by name."""
    try:
        from reef_core.models.tiny import default_pretrain_seconds, ensure_pretrained
        from reef_core.upstream.local import LocalEngine
    except ImportError as exc:
        if asked:
            raise ConfigError(
                f"{BUILTIN_TINY} needs torch, which is not installed ({exc}): "
                "run scripts/setup.sh, or pip install 'reef[model]'",
                field="inference.model_path",
            ) from exc
        log.warning("no upstream configured and torch is not installed: inference will answer 502")
        return None
    seconds = default_pretrain_seconds()
    log.info("loading %s (pretraining %.0fs on first use; cache: %s)", BUILTIN_TINY, seconds, cache_dir)
    checkpoint = ensure_pretrained(cache_dir / "tiny", seconds=seconds, log=log.info)
    return LocalEngine(checkpoint)


def _transformers_engine(source: Any, cache_dir: Path) -> Engine[Any]:
    """Load a ``transformers`` model (a GGUF is converted once into the model cache)."""
    from transformers.utils import logging as transformers_logging

    from reef_core.models import hf
    from reef_core.upstream.transformers_engine import TransformersEngine

    transformers_logging.disable_progress_bar()  # a daemon's log is lines, not progress bars
    log.info("loading %s with transformers (cache: %s)", source.spec, cache_dir)
    model, tokenizer = hf.load(source, cache=cache_dir)
    return TransformersEngine(model, tokenizer, model_name=source.spec, identity=source.sha256)
