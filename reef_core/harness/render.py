"""The renderer seam: one harness tree, rendered into one harness's own config layout.

An adapter (``adapters/pi``, ``adapters/claude_code``) implements :class:`Renderer`; reef_core
finds it by dotted reference in :data:`ADAPTERS`, so the library never imports an adapter.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from reef_core.errors import InvalidInput
from reef_core.harness.tree import HarnessTree
from reef_core.ids import validate_scenario_name

__all__ = ["ADAPTERS", "APIS", "Renderer", "Target", "renderer_for"]

#: adapter name -> ``package.module:Class`` of its renderer
ADAPTERS: dict[str, str] = {"pi": "adapters.pi.render:PiRenderer"}
#: which of reef's inference routes a harness talks to
APIS = ("anthropic", "openai")


@dataclass(frozen=True)
class Target:
    """Where a rendered harness sends its requests, and what it names in generated files."""

    reef_url: str
    scenario: str
    model: str
    api: str = "openai"
    release: str | None = None
    #: extra request headers; a value is an env-var name or a literal (the harness resolves it)
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.reef_url, str) or not self.reef_url.startswith(("http://", "https://")):
            raise InvalidInput(f"reef_url {self.reef_url!r} must be an http(s) URL", field="reef_url")
        validate_scenario_name(self.scenario)
        if not isinstance(self.model, str) or not self.model.strip():
            raise InvalidInput("model must name the model the harness requests", field="model")
        if self.api not in APIS:
            raise InvalidInput(f"api {self.api!r} must be one of {', '.join(APIS)}", field="api")
        if not all(isinstance(k, str) and k and isinstance(v, str) for k, v in self.headers.items()):
            raise InvalidInput("headers must map header names to text", field="headers")
        object.__setattr__(self, "reef_url", self.reef_url.rstrip("/"))
        object.__setattr__(self, "headers", dict(sorted(self.headers.items())))


@runtime_checkable
class Renderer(Protocol):
    """What an adapter provides to reefine."""

    #: the adapter's name, a key of :data:`ADAPTERS`
    adapter: str

    def render(self, tree: HarnessTree, target: Target) -> dict[str, bytes]:
        """The files of the harness config dir, relative to it; deterministic for equal input.
        Raises :class:`~reef_core.harness.tree.TreeError` when ``tree.problems()`` is not empty."""
        ...

    def facts(self) -> str:
        """For the proposer's prompt: what each entry kind can do in this harness, and its limits."""
        ...


def renderer_for(adapter: str) -> Renderer:
    """The renderer of ``adapter``; an unknown name raises :class:`InvalidInput` listing the known ones."""
    reference = ADAPTERS.get(adapter) if isinstance(adapter, str) else None
    if reference is None:
        raise InvalidInput(
            f"unknown adapter {adapter!r}: use one of {', '.join(sorted(ADAPTERS))}", field="adapter"
        )
    module_name, _, class_name = reference.partition(":")
    renderer = getattr(importlib.import_module(module_name), class_name)()
    if not isinstance(renderer, Renderer):
        raise TypeError(f"{reference} does not implement the Renderer protocol")
    return renderer
