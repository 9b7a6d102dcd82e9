"""The architecture, kept true: who may import what, and tidy public APIs."""

from __future__ import annotations

import ast
import importlib
import re
import sys
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


# --- Each package's docstring says what it holds and what it may import, and both are true ---------

TOPS = ("reef_core", "reef_cli", "recipes", "adapters")
PACKAGES = sorted(p.parent for top in TOPS for p in (ROOT / top).rglob("__init__.py"))
_NAME = re.compile(r"``([A-Za-z_][\w.]*)``")
_STDLIB = frozenset(sys.stdlib_module_names)


def _dotted(package: Path) -> str:
    return ".".join(package.relative_to(ROOT).parts)


def _docstring(package: Path) -> str:
    return ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""


def _members(package: Path) -> set[str]:
    """The package's modules and subpackages, by name."""
    modules = {p.stem for p in package.glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    return modules | {p.parent.name for p in package.glob("*/__init__.py")}


def _table(doc: str) -> set[str]:
    """The names in the first column of the docstring's module table."""
    names: set[str] = set()
    for line in doc.splitlines():
        cells = line.strip().split("|")
        if line.strip().startswith("|") and len(cells) > 2:
            names |= set(_NAME.findall(cells[1]))
    return names


def _may_import(doc: str) -> list[str]:
    """The names in double backticks of the paragraph that starts ``May import:``."""
    lines = doc.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("May import:")), None)
    if start is None:
        return []
    paragraph = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.strip() or re.match(r"^[A-Z][\w ]*:", line):
            break
        paragraph.append(line)
    return _NAME.findall(" ".join(paragraph).partition(";")[0])


def _absolute_imports(path: Path) -> set[str]:
    """Every name ``path`` imports, dotted (``from a import b`` is ``a.b``, whether b is a module
    or a name in one), relative imports resolved; lazy imports inside functions count too."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    here = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module.removesuffix(".__init__")
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = here.split(".")[: len(here.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            if base == "__future__":
                continue
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


@pytest.mark.parametrize("package", PACKAGES, ids=_dotted)
def test_each_package_table_lists_every_module(package: Path):
    named = _table(_docstring(package))
    assert named, f"{_dotted(package)}/__init__.py has no module table (| ``name`` | owns |)"
    members = _members(package)
    assert members - named == set(), f"{_dotted(package)}'s table leaves out {sorted(members - named)}"
    stale = sorted(name for name in named - members if not (package / name).is_file())
    assert stale == [], f"{_dotted(package)}'s table names what is not there: {stale}"


@pytest.mark.parametrize("package", PACKAGES, ids=_dotted)
def test_each_package_imports_only_what_its_docstring_allows(package: Path):
    own = _dotted(package)
    allowed = _may_import(_docstring(package))
    assert allowed, f"{own}/__init__.py has no 'May import:' line naming modules in ``double backticks``"

    def covered(name: str) -> bool:
        top = name.split(".")[0]
        if top in _STDLIB or name == own or name.startswith(own + "."):
            return True
        return any(name == a or name.startswith(a + ".") for a in allowed)

    wrong = {
        f"{path.name} imports {name}"
        for path in sorted(package.glob("*.py"))
        for name in sorted(_absolute_imports(path))
        if not covered(name)
    }
    assert wrong == set(), f"{own} may import {allowed}, but: {sorted(wrong)}"


def test_no_recipe_imports_an_adapter():
    """Recipes reach a harness through reef_core.harness (found by dotted reference), never directly."""
    users = [
        f"{p.relative_to(ROOT)} imports {name}"
        for p in _modules("recipes")
        for name in sorted(_absolute_imports(p))
        if name == "adapters" or name.startswith("adapters.")
    ]
    assert users == []
