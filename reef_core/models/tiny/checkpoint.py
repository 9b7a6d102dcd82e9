"""TinyLM checkpoints on disk: ``model.safetensors`` plus ``config.json`` in one directory.

The weights are fp32, one entry per tensor of ``state_dict()`` (the head is tied to the token
embedding and is not a tensor of its own, so it is stored once).  ``config.json`` is
``TinyConfig.to_dict()`` plus ``"format": "reef-tiny-v1"``.  Files are written under a
temporary name and renamed, so a reader never sees half a checkpoint.

``safetensors.torch.save_file`` converts through numpy, which reef does not install; the
tensors are handed to safetensors' own serializer by pointer instead (``_specs``).  The bytes
are the same format, and ``safetensors.torch.load_file`` reads them back without numpy.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import safetensors
import torch
from safetensors.torch import load_file
from torch import Tensor

from reef_core.errors import InvalidInput, StoreError
from reef_core.models.tiny.model import TinyConfig, TinyLM

__all__ = [
    "CONFIG_FILE",
    "FORMAT",
    "WEIGHTS_FILE",
    "load",
    "load_state",
    "save",
    "state_fingerprint",
]

FORMAT = "reef-tiny-v1"
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"


def _tensors(model: TinyLM) -> dict[str, Tensor]:
    # a copy: a trainer stepping the live model meanwhile cannot tear the snapshot
    return {
        name: tensor.detach().to(device="cpu", dtype=torch.float32, copy=True).contiguous()
        for name, tensor in model.state_dict().items()
    }


def _specs(tensors: dict[str, Tensor]) -> dict[str, Any]:
    """safetensors' descriptions of ``tensors``, which must outlive their use (pointers)."""
    if sys.byteorder != "little":  # the format is little-endian and we pass raw memory
        raise StoreError("safetensors checkpoints need a little-endian machine")
    return {
        name: safetensors.TensorSpec(
            dtype="float32", shape=list(t.shape), data_ptr=t.data_ptr(), data_len=t.nbytes
        )
        for name, t in tensors.items()
    }


def _replace(path: Path, write: Any) -> None:
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(temp)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def save(model: TinyLM, directory: Path) -> tuple[Path, Path]:
    """Write ``model.safetensors`` and ``config.json`` into ``directory``; returns both paths."""
    directory = Path(directory)
    weights, config = directory / WEIGHTS_FILE, directory / CONFIG_FILE
    tensors = _tensors(model)
    specs = _specs(tensors)
    body = json.dumps({**model.config.to_dict(), "format": FORMAT}, indent=2, sort_keys=True) + "\n"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        _replace(weights, lambda p: safetensors.serialize_file(specs, str(p)))
        _replace(config, lambda p: p.write_text(body))
    except OSError as exc:
        raise StoreError(f"cannot write a checkpoint to {directory}: {exc}") from exc
    del tensors  # kept alive until here: serialize_file read their memory by address
    return weights, config


def load_state(path: Path) -> dict[str, Tensor]:
    """The tensors of one ``.safetensors`` file, or ``StoreError`` if it cannot be read."""
    path = Path(path)
    if not path.is_file():
        raise StoreError(f"no checkpoint weights at {path}")
    try:
        return load_file(str(path))
    except Exception as exc:  # safetensors raises its own error types and plain OSError
        raise StoreError(f"cannot read checkpoint weights {path}: {exc}") from exc


def _read_config(path: Path) -> TinyConfig:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise StoreError(f"cannot read checkpoint config {path}: {exc}") from exc
    if not isinstance(data, dict) or data.pop("format", None) != FORMAT:
        raise StoreError(f"{path} is not a {FORMAT} checkpoint config")
    try:
        return TinyConfig.from_dict(data)
    except (InvalidInput, TypeError) as exc:
        raise StoreError(f"bad checkpoint config {path}: {exc}") from exc


def load(directory: Path) -> TinyLM:
    """The model saved in ``directory``, in eval mode."""
    directory = Path(directory)
    config = _read_config(directory / CONFIG_FILE)
    state = load_state(directory / WEIGHTS_FILE)
    # the random init is overwritten at once; forking keeps the caller's RNG stream intact
    with torch.random.fork_rng(devices=[]):
        model = TinyLM(config)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:  # missing, unexpected or mis-shaped tensors
        raise StoreError(f"checkpoint {directory} does not fit its config: {exc}") from exc
    return model.eval()


def state_fingerprint(model: TinyLM) -> str:
    """16 hex digits of sha256 over the model's tensors (names, shapes and fp32 values).

    It hashes exactly the bytes ``save`` writes, so it equals the start of the sha256 of
    ``model.safetensors``; any change to any weight changes it.
    """
    tensors = _tensors(model)
    digest = hashlib.sha256(safetensors.serialize(_specs(tensors))).hexdigest()
    del tensors
    return digest[:16]
