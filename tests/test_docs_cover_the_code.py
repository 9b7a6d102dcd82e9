"""The pages that describe the code name what is there: every `reef` command in operations.md,
every package and every path in architecture.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from reef_cli.main import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TOPS = ("reef_core", "reef_cli", "recipes", "adapters")


def _commands() -> list[str]:
    group = typer.main.get_command(app)
    return sorted(group.commands)  # type: ignore[attr-defined]


def _listed() -> set[str]:
    """The commands in operations.md's table: ``reef promote\\|reject SCENARIO cN`` lists two."""
    table = (DOCS / "operations.md").read_text().split("## Examples")[0]
    shown = re.findall(r"`reef ([^`]+)`", table)
    return {name for cell in shown for name in cell.split()[0].split("\\|")}


@pytest.mark.parametrize("command", _commands())
def test_operations_lists_every_command(command: str):
    assert command in _listed(), f"docs/operations.md's table lacks reef {command}"


def _layout() -> list[str]:
    """The paths of architecture.md's layout block: each line's first word, nested by indent
    under the folders (names ending in ``/``) above it."""
    text = (DOCS / "architecture.md").read_text()
    block = text.split("## Where things are", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    paths: list[str] = []
    stack: list[tuple[int, str]] = []
    for line in block.splitlines():
        if not line.strip() or (not line.lstrip()[0].isalnum() and not line.lstrip().startswith(("_", "."))):
            continue
        indent = len(line) - len(line.lstrip())
        word = line.split()[0]
        if indent and line[: indent + 1].strip() == "" and len(line) - len(line.lstrip()) > 20:
            continue  # a wrapped description, not an entry
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else ""
        path = parent + word
        paths.append(path)
        if word.endswith("/"):
            stack.append((indent, path))
    return paths


def test_every_path_architecture_names_exists():
    missing = [path for path in _layout() if not (ROOT / path.rstrip("/")).exists()]
    assert _layout(), "docs/architecture.md has no layout block"
    assert missing == []


def test_architecture_names_every_package():
    named = {path.rstrip("/") for path in _layout()}
    packages = sorted(
        str(p.parent.relative_to(ROOT)) for top in TOPS for p in (ROOT / top).rglob("__init__.py")
    )
    assert [package for package in packages if package not in named] == []


def test_every_module_path_in_the_prose_exists():
    """Paths in backticks (``store/writer.py``, ``daemon/``) name files there, relative to the
    repository or to one of its packages."""
    text = (DOCS / "architecture.md").read_text()
    mentioned = set(re.findall(r"`([\w./-]+(?:\.py|/))`", text))
    bases = [ROOT, *(ROOT / top for top in TOPS)]
    missing = sorted(m for m in mentioned if not any((base / m.rstrip("/")).exists() for base in bases))
    assert missing == []
