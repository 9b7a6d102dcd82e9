"""Pretraining: the loss falls, and the checkpoint cache is built once, atomically."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from reef_core.errors import ConfigError, InvalidInput
from reef_core.models.tiny import (
    PretrainReport,
    TinyConfig,
    TinyLM,
    build_corpus,
    default_pretrain_seconds,
    ensure_pretrained,
    heldout_loss,
    load,
    pretrain,
    split_dialogues,
)


def test_a_few_seconds_of_pretraining_learn_a_lot(pretrained: tuple[TinyLM, PretrainReport], capsys):
    model, report = pretrained
    assert report.steps > 0
    assert report.parameters == model.num_parameters()
    assert report.untrained_heldout_loss == pytest.approx(5.56, abs=0.2)  # ~ln(259): uniform guessing
    assert report.heldout_loss < 0.8 * report.untrained_heldout_loss
    assert not model.training
    with capsys.disabled():
        print(
            f"\n[tiny] pretrain {report.steps} steps in {report.seconds:.1f}s "
            f"({report.steps / report.seconds:.1f} steps/s of 32x64 tokens): train {report.train_loss:.3f}, "
            f"held-out {report.heldout_loss:.3f} (untrained {report.untrained_heldout_loss:.3f}) nats/byte"
        )


def test_step_budget_is_reproducible():
    first, report = pretrain(seconds=None, max_steps=3, batch_size=4, seed=7)
    second, _ = pretrain(seconds=None, max_steps=3, batch_size=4, seed=7)
    assert report.steps == 3
    for a, b in zip(first.parameters(), second.parameters(), strict=True):
        assert torch.equal(a, b)


def test_heldout_loss_reads_corpus_text(pretrained: tuple[TinyLM, PretrainReport]):
    model, _ = pretrained
    text = "\n\n".join(split_dialogues(build_corpus(5, dialogues=40)))
    assert 0 < heldout_loss(model, text, max_batches=1) < 5
    with pytest.raises(InvalidInput):
        heldout_loss(model, "")


def test_pretrain_needs_a_budget():
    with pytest.raises(InvalidInput):
        pretrain(seconds=None, max_steps=None)
    with pytest.raises(InvalidInput):
        pretrain(seconds=-1)


def test_ensure_pretrained_caches(tmp_path: Path, monkeypatch):
    calls: list[tuple[float, int]] = []

    def fake_pretrain(
        config: TinyConfig, *, seconds: None, max_steps: int, seed: int, log
    ) -> tuple[TinyLM, None]:
        calls.append((max_steps, seed))
        return TinyLM(config), None

    monkeypatch.setattr(importlib.import_module("reef_core.models.tiny.pretrain"), "pretrain", fake_pretrain)
    logs: list[str] = []
    first = ensure_pretrained(tmp_path, seconds=0.5, log=logs.append)
    assert calls == [(5, 0)]  # a step budget: 10 steps a second of budget
    assert any("pretraining" in line for line in logs)
    assert load(first).config == TinyConfig()
    logs.clear()
    assert ensure_pretrained(tmp_path, seconds=0.5, log=logs.append) == first
    assert logs == [] and len(calls) == 1  # served from the cache, no second run
    others = {ensure_pretrained(tmp_path, seconds=0.5, seed=1), ensure_pretrained(tmp_path, seconds=2.0)}
    assert first not in others and len(others) == 2 and len(calls) == 3
    assert {p for p in tmp_path.iterdir() if p.is_dir()} == {first, *others}  # and no temp dirs


_CHILD = """
import sys
from pathlib import Path
from reef_core.models.tiny import TinyConfig, ensure_pretrained
small = TinyConfig(d_model=32, n_layer=1, n_head=2)  # the race is the point, not the model
path = ensure_pretrained(
    Path(sys.argv[1]), seconds=0.3, config=small, log=lambda line: print("LOG", line, flush=True)
)
print("DIR", path, flush=True)
"""


def test_concurrent_processes_train_once(tmp_path: Path):
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [child.communicate(timeout=120) for child in children]
    assert [child.returncode for child in children] == [0, 0], [err for _, err in outputs]
    dirs = {line for out, _ in outputs for line in out.splitlines() if line.startswith("DIR ")}
    assert len(dirs) == 1
    assert sum("LOG pretraining" in out for out, _ in outputs) == 1  # the other one waited
    checkpoint = Path(dirs.pop().removeprefix("DIR "))
    assert {p.name for p in checkpoint.iterdir()} == {"config.json", "model.safetensors"}
    assert load(checkpoint).config.d_model == 32
    assert [p for p in tmp_path.iterdir() if p.is_dir() and p != checkpoint] == []  # no temp dirs left


def test_default_pretrain_seconds(monkeypatch):
    monkeypatch.delenv("REEF_TINY_PRETRAIN_SECONDS", raising=False)
    assert default_pretrain_seconds() == 60.0
    monkeypatch.setenv("REEF_TINY_PRETRAIN_SECONDS", " 4.5 ")
    assert default_pretrain_seconds() == 4.5
    for bad in ("soon", "0", "-3", "inf"):
        monkeypatch.setenv("REEF_TINY_PRETRAIN_SECONDS", bad)
        with pytest.raises(ConfigError):
            default_pretrain_seconds()
