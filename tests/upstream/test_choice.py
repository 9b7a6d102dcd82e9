"""Which engine serves in-process (``reef_core.upstream.choice``): chosen from the settings
without loading anything, a model path reef cannot serve refused at once, and torch never
imported by the choice itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from reef_core.config import load_settings
from reef_core.errors import ConfigError
from reef_core.upstream.choice import engine_loader

ROOT = Path(__file__).resolve().parents[2]


def settings(tmp_path: Path, *flags: str):
    return load_settings(overrides=list(flags), env={}, cwd=tmp_path)


def test_an_http_upstream_with_no_model_path_serves_nothing_in_process(tmp_path: Path):
    chosen = engine_loader(settings(tmp_path, "--inference.upstream-url", "http://127.0.0.1:9"), tmp_path)
    assert chosen is None


@pytest.mark.parametrize(
    "flags",
    [
        (),
        ("--inference.model-path", "builtin:tiny"),
        ("--inference.model-path", "builtin:tiny", "--inference.upstream-url", "http://127.0.0.1:9"),
    ],
)
def test_the_embedded_model_serves_when_asked_for_or_when_no_upstream_is_configured(tmp_path: Path, flags):
    chosen = engine_loader(settings(tmp_path, *flags), tmp_path)
    assert chosen is not None
    assert not (tmp_path / "tiny").exists()  # nothing pretrained or loaded until the loader runs


def test_a_model_path_reef_cannot_serve_is_refused_naming_it(tmp_path: Path):
    (tmp_path / "notes").mkdir()
    with pytest.raises(ConfigError, match="is not a model reef can serve in-process") as refused:
        engine_loader(settings(tmp_path, "--inference.model-path", str(tmp_path / "notes")), tmp_path)
    assert refused.value.field == "inference.model_path"


def test_choosing_imports_no_torch(tmp_path: Path):
    script = (
        "import sys; from pathlib import Path; from reef_core.config import load_settings; "
        "from reef_core.upstream.choice import engine_loader; "
        "here = Path(sys.argv[1]); "
        "assert engine_loader(load_settings(env={}, cwd=here), here) is not None; "
        "assert not {'torch', 'transformers', 'peft'} & set(sys.modules), sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=ROOT, check=True, timeout=120)
