"""The architecture, kept true: who may import what, and tidy public APIs."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _modules(package: str):
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", _modules("reef_core"), ids=lambda p: str(p.relative_to(ROOT)))
def test_reef_core_stays_a_library(path: Path):
    forbidden = {"typer", "rich", "textual", "click", "reef_cli", "recipes", "adapters"}
    assert not _imports(path) & forbidden


@pytest.mark.parametrize("path", _modules("reef_core/wire"), ids=lambda p: str(p.relative_to(ROOT)))
def test_wire_is_pure(path: Path):
    assert not _imports(path) & {"aiohttp", "httpx", "pygit2", "socket", "asyncio"}


def test_aiohttp_lives_in_the_daemon_and_the_upstream_client():
    allowed = (ROOT / "reef_core" / "daemon", ROOT / "reef_core" / "upstream")
    users = [p for p in _modules("reef_core") if "aiohttp" in _imports(p)]
    assert [
        p.relative_to(ROOT)
        for p in users
        if not p.is_relative_to(allowed[0]) and not p.is_relative_to(allowed[1])
    ] == []


def test_torch_stays_off_the_serving_path():
    """The daemon must run on a machine without torch: only the local models, their engines and
    the weights recipes import it (and the daemon loads those lazily)."""
    allowed = [
        ROOT / "reef_core" / "models",
        ROOT / "reef_core" / "upstream" / "local.py",
        ROOT / "reef_core" / "upstream" / "transformers_engine.py",
    ]
    users = [p for p in _modules("reef_core") if "torch" in _imports(p)]
    assert [
        p.relative_to(ROOT) for p in users if not any(p == a or p.is_relative_to(a) for a in allowed)
    ] == []
    for module in ("reef_core.daemon.app", "reef_core.daemon.inference", "reef_core.upstream.sglang"):
        source = (ROOT / (module.replace(".", "/") + ".py")).read_text()
        assert "import torch" not in source


def test_pygit2_lives_only_in_the_store():
    ours = [p for package in ("reef_core", "reef_cli", "recipes", "adapters") for p in _modules(package)]
    users = [p for p in ours if "pygit2" in _imports(p)]
    outside = [p.relative_to(ROOT) for p in users if not p.is_relative_to(ROOT / "reef_core" / "store")]
    assert outside == []


@pytest.mark.parametrize(
    "module", ["reef_core.errors", "reef_core.ids", "reef_core.config", "reef_core.store"]
)
def test_public_api_is_declared_and_complete(module: str):
    mod = importlib.import_module(module)  # ruff's RUF022 keeps each __all__ sorted
    assert len(set(mod.__all__)) == len(mod.__all__)
    for name in mod.__all__:
        assert hasattr(mod, name), f"{module}.__all__ names missing {name}"
