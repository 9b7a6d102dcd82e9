"""The cookbook examples a user runs as they are (``recipes/<name>/examples/<example>/``): each
``reef.toml`` is a settings file reef loads, naming a recipe that accepts its ``recipe.config``,
and each ``run.sh`` is a shell script bash can read.  (Running them is the recipes' own tests'
work: their daemons, models and steps are tested there.)"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from reef_core.config import load_settings
from reef_core.learning.loader import load_recipe

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.parent for p in (ROOT / "recipes").glob("*/examples/*/run.sh"))


def test_each_cookbook_recipe_has_an_example():
    assert {p.parts[-3] for p in EXAMPLES} >= {"gepa", "sao", "grpo"}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: "/".join(p.parts[-3:]))
def test_an_example_s_settings_load_and_its_recipe_takes_them(example: Path, tmp_path: Path):
    settings = load_settings(file=example / "reef.toml", env={}, cwd=tmp_path)
    recipe = load_recipe(settings.recipe.name, settings.recipe.implementation)
    recipe.check_config(settings.recipe.config)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: "/".join(p.parts[-3:]))
def test_an_example_s_script_parses(example: Path):
    script = example / "run.sh"
    assert script.stat().st_mode & 0o111, f"{script} is not executable"
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
