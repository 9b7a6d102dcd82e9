"""The embedded model, pretrained once per test session (and cached across sessions)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the same minute of pretraining as the demo: less leaves a model too garbled to ever say "Sure"
TEST_PRETRAIN_SECONDS = "60"


@pytest.fixture(scope="session")
def model_cache() -> Path:
    cache = ROOT / ".cache" / "models"
    cache.mkdir(parents=True, exist_ok=True)
    return cache


@pytest.fixture
def tiny_reef(tmp_path, model_cache, monkeypatch):
    """Start reef serving builtin:tiny with the given extra flags."""
    from tests.daemon.conftest import RunningReef

    monkeypatch.setenv("REEF_TINY_PRETRAIN_SECONDS", TEST_PRETRAIN_SECONDS)
    started = []

    def make(*flags: str) -> RunningReef:
        reef = RunningReef(
            tmp_path / f"reef{len(started)}",
            "--inference.model-path",
            "builtin:tiny",
            "--inference.model-cache",
            str(model_cache),
            *flags,
        )
        started.append(reef.start(timeout=600))
        return reef

    yield make
    for reef in started:
        reef.stop()
