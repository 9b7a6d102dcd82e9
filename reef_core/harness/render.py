"""The adapter seams: one harness tree rendered into one harness's own config layout, and the
``curl … | sh`` installer that puts a rendered release on a person's machine.

An adapter (``adapters/pi``, ``adapters/claude_code``) implements :class:`Renderer` and may
implement :class:`Installer` (and a health check, :mod:`reef_core.harness.health`); reef_core finds
them by dotted reference in :data:`ADAPTERS` and :data:`INSTALLERS` (:func:`load_reference`), so
the library never imports an adapter.  :func:`entry_files` is the part of rendering every
adapter shares: the tree checked, and its entries laid out as files by kind.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from reef_core.errors import InvalidInput
from reef_core.harness.tree import HarnessTree, TreeError, parse_frontmatter
from reef_core.ids import validate_scenario_name

__all__ = [
    "ADAPTERS",
    "AGENTS_TITLE",
    "APIS",
    "INSTALLERS",
    "AgentsMdRenderer",
    "InstallPlan",
    "Installer",
    "Renderer",
    "Target",
    "agents_md",
    "agents_md_context",
    "check_hook_groups",
    "entry_files",
    "installer_for",
    "load_reference",
    "refuse_owned",
    "renderer_for",
    "tree_context",
]

#: adapter name -> ``package.module:Class`` of its renderer
ADAPTERS: dict[str, str] = {
    "pi": "adapters.pi.render:PiRenderer",
    "claude_code": "adapters.claude_code.render:ClaudeCodeRenderer",
    "codex": "adapters.codex.render:CodexRenderer",
    "opencode": "adapters.opencode.render:OpencodeRenderer",
}
#: adapter name -> ``package.module:Class`` of its installer (an adapter may have none)
INSTALLERS: dict[str, str] = {
    "pi": "adapters.pi.install:PiInstaller",
    "claude_code": "adapters.claude_code.install:ClaudeCodeInstaller",
    "codex": "adapters.codex.install:CodexInstaller",
    "opencode": "adapters.opencode.install:OpencodeInstaller",
}
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

    def skipped(self, tree: HarnessTree) -> list[str]:
        """One line for people per entry of ``tree`` this harness has no form for (it is left out
        of :meth:`render`'s files); empty when the harness takes every entry."""
        ...

    def facts(self) -> str:
        """For the proposer's prompt: what each entry kind can do in this harness, and its limits."""
        ...

    def prompt_context(self, system: str, served: HarnessTree | None, tree: HarnessTree) -> str:
        """A recorded system prompt as the harness would have sent it with ``tree`` installed:
        what ``served`` (the tree that was installed, when known) put into ``system`` taken out,
        ``tree``'s rules and skill list put in.  reefine's replay gate sends a recorded task
        with the current tree and with a candidate's through this one function."""
        ...


@dataclass(frozen=True)
class InstallPlan:
    """What one installer script puts on a machine: ``tree`` (a release, or the empty tree before
    the first one) rendered for ``target``, and how the launcher it installs reaches reef.

    ``commit`` is the release commit (None with no release); ``python`` the interpreter the
    launcher runs on (the daemon's own: reef is local, so it is on the same machine);
    ``token_required`` says the daemon wants a token, which the script never contains.
    """

    tree: HarnessTree
    target: Target
    commit: str | None = None
    python: str = field(default_factory=lambda: sys.executable)
    token_required: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.tree, HarnessTree):
            raise InvalidInput("tree must be a HarnessTree", field="tree")
        if not isinstance(self.python, str) or not self.python.startswith("/"):
            raise InvalidInput(f"python {self.python!r} must be an absolute path", field="python")
        if (self.commit is None) != (self.target.release is None):
            raise InvalidInput("commit and target.release go together: both or neither", field="commit")


@runtime_checkable
class Installer(Protocol):
    """What an adapter provides to ``GET /reef/harness/install``."""

    #: the adapter's name, a key of :data:`INSTALLERS`
    adapter: str

    def script(self, plan: InstallPlan) -> str:
        """A self-contained POSIX sh script installing ``plan``; it never contains a token.
        Raises :class:`~reef_core.harness.tree.TreeError` when the tree cannot be rendered."""
        ...

    def files(self, plan: InstallPlan) -> dict[str, bytes]:
        """The config folder :meth:`script` writes, path → bytes: what a launcher lays out for a
        session given another tree than the installed one (a canary's)."""
        ...


#: the generated header of an ``AGENTS.md`` (:func:`agents_md`), as it reaches a system prompt
_AGENTS_HEADER = re.compile(r"# Harness rules \(reef\)\n\nGenerated by reef for scenario [^\n]*\n\n?")
AGENTS_TITLE = "# Harness rules (reef)"


def agents_md(tree: HarnessTree, target: Target) -> str:
    """The ``AGENTS.md`` of a harness that reads one rules file (pi, Codex): a generated header,
    then each rule of ``tree`` under ``## <name>``."""
    release = f"release {target.release}" if target.release else "an unreleased candidate"
    parts = [
        f"{AGENTS_TITLE}\n\n"
        f"Generated by reef for scenario `{target.scenario}`, {release}. "
        "Change these rules through reef, not here: the next install overwrites this file.\n"
    ]
    parts += [f"## {entry.name}\n\n{entry.content.strip()}\n" for entry in tree.of_kind("rule")]
    return "\n".join(parts)


def agents_md_context(
    system: str, served: HarnessTree | None, tree: HarnessTree, *, skills_title: str
) -> str:
    """:meth:`Renderer.prompt_context` for a harness that copies :func:`agents_md` into its prompt
    verbatim: the served rules come out by their exact sections, the header by its pattern, and
    ``tree``'s rules and skills go in after what is left (the harness's own skill listing stays:
    both sides of a replay keep it alike)."""
    text = _AGENTS_HEADER.sub("", system)
    for entry in served.of_kind("rule") if served is not None else []:
        text = text.replace(f"## {entry.name}\n\n{entry.content.strip()}\n", "")
    return tree_context(tree, before=text, rules_title=AGENTS_TITLE, skills_title=skills_title)


class AgentsMdRenderer:
    """What the renderers of harnesses that copy :func:`agents_md` into their prompt verbatim
    (pi, Codex, opencode) share: a subclass sets ``adapter``, ``facts_text`` and
    ``skills_title``, writes ``render``, and replaces :meth:`skipped` when some kind of entry has
    no form in its harness."""

    adapter: str
    facts_text: str
    skills_title: str

    def skipped(self, tree: HarnessTree) -> list[str]:
        return []

    def facts(self) -> str:
        return self.facts_text

    def prompt_context(self, system: str, served: HarnessTree | None, tree: HarnessTree) -> str:
        return agents_md_context(system, served, tree, skills_title=self.skills_title)


def refuse_owned(owned: list[str], path: str, owner: str) -> None:
    """A tree's harness config file (``path``) may not set the keys reef owns there (``owned``,
    those it set; ``owner`` says for whom and what they are): a :class:`TreeError` naming them."""
    if owned:
        raise TreeError(
            f"{path} sets {', '.join(owned)}, which reef owns for {owner}: remove them", field=path
        )


def check_hook_groups(hooks: Any, path: str) -> None:
    """A tree's ``hooks`` in a harness config file (``path``, Claude Code's settings or Codex's
    config; ``None`` when unset) must map event names to lists of matcher groups."""
    if hooks is not None and not (
        isinstance(hooks, dict) and all(isinstance(groups, list) for groups in hooks.values())
    ):
        raise TreeError(f"{path}: hooks must map event names to lists of matcher groups", field=path)


def tree_context(tree: HarnessTree, *, before: str = "", rules_title: str, skills_title: str) -> str:
    """What a harness puts in its prompt for ``tree``, after ``before`` (a recorded system text
    with the served tree taken out), as text blocks apart by a blank line: the rules under
    ``rules_title`` (each as ``## <name>``), then the skills, one ``- <name>: <description>`` line
    each, under ``skills_title``; a block is left out when it would be empty."""
    parts = [before.rstrip()] if before.strip() else []
    rules = [f"## {entry.name}\n\n{entry.content.strip()}\n" for entry in tree.of_kind("rule")]
    if rules:
        parts.append(f"{rules_title}\n\n" + "\n".join(rules))
    skills = []
    for entry in tree.of_kind("skill"):
        front = parse_frontmatter(entry.content)
        description = front.fields.get("description", "") if front else ""
        skills.append(f"- {entry.name}: {description}".rstrip(": "))
    if skills:
        parts.append(f"{skills_title}\n" + "\n".join(skills))
    return "\n\n".join(parts)


def entry_files(tree: HarnessTree, harness: str, layout: Mapping[str, str]) -> dict[str, bytes]:
    """The files of ``tree``'s entries of each kind in ``layout``, which maps a kind to a path
    pattern (``"skills/{name}/SKILL.md"``), in the order of ``layout``.  Raises
    :class:`~reef_core.harness.tree.TreeError` naming ``harness`` when ``tree.problems()`` is not
    empty."""
    problems = tree.problems()
    if problems:
        raise TreeError(
            f"the harness tree cannot be rendered for {harness}: " + "; ".join(problems), field="tree"
        )
    return {
        pattern.format(name=entry.name): entry.content.encode("utf-8")
        for kind, pattern in layout.items()
        for entry in tree.of_kind(kind)
    }


def load_reference(registry: Mapping[str, str], adapter: object, unknown: str) -> Any:
    """An instance of the class that ``registry`` names for ``adapter`` (``module:Class``, imported
    now); an adapter the registry lacks raises :class:`InvalidInput` saying ``unknown`` and listing
    the known ones."""
    reference = registry.get(adapter) if isinstance(adapter, str) else None
    if reference is None:
        raise InvalidInput(
            f"{unknown} {adapter!r}: use one of {', '.join(sorted(registry))}", field="adapter"
        )
    module_name, _, class_name = reference.partition(":")
    return getattr(importlib.import_module(module_name), class_name)()


def renderer_for(adapter: str) -> Renderer:
    """The renderer of ``adapter``; an unknown name raises :class:`InvalidInput` listing the known ones."""
    renderer = load_reference(ADAPTERS, adapter, "unknown adapter")
    if not isinstance(renderer, Renderer):
        raise TypeError(f"{ADAPTERS[adapter]} does not implement the Renderer protocol")
    return renderer


def installer_for(adapter: str) -> Installer:
    """The installer of ``adapter``; an adapter without one raises :class:`InvalidInput` listing
    those that have one."""
    installer = load_reference(INSTALLERS, adapter, "no installer for adapter")
    if not isinstance(installer, Installer):
        raise TypeError(f"{INSTALLERS[adapter]} does not implement the Installer protocol")
    return installer
