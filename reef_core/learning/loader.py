"""Finding a recipe class by name (``basic``, ``grpo``, ``reefine``, and the cookbook's ``gepa`` and
``sao``) or ``package.module:Class``."""

from __future__ import annotations

import importlib

from reef_core.errors import ConfigError
from reef_core.learning.recipe import BasicRecipe, Recipe

__all__ = ["BUILT_IN", "load_recipe"]

BUILT_IN: dict[str, str] = {
    "basic": "reef_core.learning.recipe:BasicRecipe",
    "gepa": "recipes.gepa.recipe:GepaRecipe",
    "grpo": "recipes.grpo.recipe:GrpoRecipe",
    "reefine": "recipes.reefine.recipe:ReefineRecipe",
    "sao": "recipes.sao.recipe:SAORecipe",
}


def load_recipe(name: str, implementation: str | None = None) -> type[Recipe]:
    reference = implementation or BUILT_IN.get(name)
    if reference is None:
        raise ConfigError(
            f"unknown recipe {name!r}: use one of {', '.join(sorted(BUILT_IN))} or package.module:Class",
            field="recipe.name",
        )
    if reference == "reef_core.learning.recipe:BasicRecipe":
        return BasicRecipe
    module_name, _, class_name = reference.partition(":")
    if not module_name or not class_name:
        raise ConfigError(
            f"recipe reference {reference!r} is not package.module:Class", field="recipe.implementation"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import recipe {reference}: {exc}", field="recipe.implementation") from exc
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type) or not issubclass(cls, Recipe):
        raise ConfigError(f"{reference} is not a reef recipe class", field="recipe.implementation")
    return cls
