"""Checkpoints: safetensors + config.json round trips, fingerprints, unreadable files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from reef_core.errors import StoreError
from reef_core.models.tiny import BOS, TinyConfig, TinyLM, load, load_state, save, state_fingerprint


def _sample(model: TinyLM) -> list[list[int]]:
    generator = torch.Generator().manual_seed(11)
    outs = model.generate([[BOS, 65, 66], [BOS]], max_new_tokens=20, generator=generator)
    return [out.tokens for out in outs]


def test_round_trip_gives_identical_outputs(untrained: TinyLM, tmp_path: Path):
    weights, config = save(untrained, tmp_path / "ckpt")
    assert (weights.name, config.name) == ("model.safetensors", "config.json")
    assert json.loads(config.read_text()) == {**untrained.config.to_dict(), "format": "reef-tiny-v1"}
    loaded = load(tmp_path / "ckpt")
    assert not loaded.training
    assert _sample(loaded) == _sample(untrained)
    ids = torch.tensor([[BOS, 1, 2, 3]])
    assert torch.equal(loaded(ids), untrained(ids))
    assert state_fingerprint(loaded) == state_fingerprint(untrained)


def test_file_layout(untrained: TinyLM, tmp_path: Path):
    weights, _ = save(untrained, tmp_path)
    state = load_state(weights)
    assert set(state) == set(untrained.state_dict())  # the tied head is not a second copy
    assert all(t.dtype == torch.float32 for t in state.values())
    assert 3.3e6 < weights.stat().st_size < 3.6e6
    # the fingerprint hashes exactly the bytes on disk
    assert hashlib.sha256(weights.read_bytes()).hexdigest().startswith(state_fingerprint(untrained))
    assert {p.name for p in tmp_path.iterdir()} == {"config.json", "model.safetensors"}  # no temp files


def test_fingerprint_tracks_weight_changes(untrained: TinyLM):
    before = state_fingerprint(untrained)
    assert len(before) == 16
    assert state_fingerprint(untrained) == before
    with torch.no_grad():
        untrained.blocks[2].fc.weight[3, 4] += 1e-3
    assert state_fingerprint(untrained) != before


def test_other_configs_round_trip(tmp_path: Path):
    model = TinyLM(TinyConfig(d_model=32, n_layer=1, n_head=2, max_len=64))
    save(model, tmp_path)
    assert load(tmp_path).config == model.config


def test_unreadable_checkpoints_raise_store_error(untrained: TinyLM, tmp_path: Path):
    with pytest.raises(StoreError):
        load(tmp_path / "missing")
    save(untrained, tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(StoreError):
        load(tmp_path)
    with pytest.raises(StoreError):
        load_state(tmp_path / "model.safetensors")
    save(untrained, tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**untrained.config.to_dict(), "format": "other"}))
    with pytest.raises(StoreError):
        load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"format": "reef-tiny-v1", "d_model": 64}))
    with pytest.raises(StoreError):  # weights of a 128-wide model under a 64-wide config
        load(tmp_path)
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(StoreError):
        load(tmp_path)
