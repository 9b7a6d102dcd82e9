"""The wire package stays pure: stdlib and reef_core.errors only, tidy public names."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import reef_core.wire

PACKAGE = Path(reef_core.wire.__file__).parent
MODULES = sorted(PACKAGE.glob("*.py"))
# nothing that touches sockets, files, processes or the clock
ALLOWED = {"__future__", "codecs", "copy", "dataclasses", "datetime", "json", "math", "re", "typing"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_modules_import_only_the_stdlib_errors_and_each_other(path: Path):
    for name in _imports(path):
        assert (
            name.split(".")[0] in ALLOWED or name == "reef_core.errors" or name.startswith("reef_core.wire")
        ), f"{path.name} imports {name}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_public_api_is_declared_sorted_and_complete(path: Path):
    name = "reef_core.wire" if path.stem == "__init__" else f"reef_core.wire.{path.stem}"
    module = importlib.import_module(name)
    assert module.__doc__, f"{name} has no docstring"
    assert len(set(module.__all__)) == len(module.__all__)
    for public in module.__all__:
        assert hasattr(module, public), f"{name}.__all__ names missing {public}"
