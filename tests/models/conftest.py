"""Shared models for the tiny-model tests: one untrained, one briefly pretrained."""

from __future__ import annotations

import math

import pytest
import torch

from reef_core.models.tiny import EOS, PretrainReport, TinyConfig, TinyLM, pretrain

#: short enough for CI, long enough for the loss to fall well below the untrained model's;
#: the step cap keeps the result the same on a fast machine and a loaded one
PRETRAIN_STEPS = 40
PRETRAIN_SECONDS = 20.0


@pytest.fixture
def untrained() -> TinyLM:
    torch.manual_seed(1234)
    return TinyLM(TinyConfig()).eval()


# module-scoped (its tests are in test_pretrain.py), so that the suite's workers keep its tests on
# one worker (tests/conftest.py) and pretrain once: session-scoped, each worker that ran one of
# them pretrained again (11 s of CPU each)
@pytest.fixture(scope="module")
def pretrained() -> tuple[TinyLM, PretrainReport]:
    return pretrain(seconds=PRETRAIN_SECONDS, max_steps=PRETRAIN_STEPS, seed=0)


def stopping_model(p_eos: float) -> TinyLM:
    """A model whose every distribution is: EOS with ``p_eos``, else a uniform byte.

    The final LayerNorm outputs a constant unit vector, and only EOS's embedding row points
    along it, so all byte logits are 0 and EOS's is log(p/(1-p) * 256).
    """
    model = TinyLM().eval()
    with torch.no_grad():
        model.ln_f.weight.zero_()
        model.ln_f.bias.zero_()
        model.ln_f.bias[0] = 1.0
        model.tok.weight[:, 0] = 0.0
        model.tok.weight[EOS, 0] = math.log(p_eos / (1 - p_eos) * 256)
    return model
